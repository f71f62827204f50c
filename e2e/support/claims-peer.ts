/**
 * A hostile volunteer's node for the hostile-claims story: a swarm node with a valid trainer pass
 * (passed in, issued by the platform for its key) that trains nothing and gossips correctly signed
 * progress records claiming what no trainer could, through the swarm's own progress tracker and
 * gossip transport:
 *   1. "2^47 samples": a first record of a new session whose contributed total is 2^47 (a receiver
 *      takes a session's first total as it comes; the platform's credit bound must cut it);
 *   2. "a step a million ahead": the swarm's epoch + 1,000,000 with a tiny loss (the loss curve);
 *   3. "10^9 samples/s" (the dashboard's throughput).
 * Claims 2 and 3 alternate, one a second, for --seconds.
 *
 *   node e2e/support/claims-peer.ts < claims.json
 *
 * claims.json: { "experimentId", "authorityPublicKey" (base64url), "pass", "secretKey" (base64url,
 * the 64-byte Ed25519 secret key the pass was issued for), "addresses": [multiaddr with /p2p/…],
 * "seconds" }. Prints one JSON line per claim published ({ claim, epoch }); exits 0 when done, 1 on
 * bad input or when it heard no trainer within a minute.
 */
import { text } from "node:stream/consumers";
import { decodePublicKey, fromBase64Url, keyPairFromSecretKey } from "@barnraise/protocol";
import { pino } from "pino";
import { z } from "zod";
import { SwarmNode } from "../../packages/swarm/src/p2p/swarm-node.ts";
import { AuthorityKeys } from "../../packages/swarm/src/platform/authority-keys.ts";
import { GossipProgressTransport, progressTopic } from "../../packages/swarm/src/progress/progress-gossip.ts";
import { ProgressTracker } from "../../packages/swarm/src/progress/progress-tracker.ts";

const inputSchema = z.strictObject({
  experimentId: z.string().min(1),
  authorityPublicKey: z.string(),
  pass: z.string().min(1),
  secretKey: z.string(),
  addresses: z.array(z.string().min(1)).min(1),
  seconds: z.number().positive().max(600),
});

const input = inputSchema.parse(JSON.parse(await text(process.stdin)));
const node = await SwarmNode.create({
  experimentId: input.experimentId,
  identity: keyPairFromSecretKey(fromBase64Url(input.secretKey, "secret key")),
  authority: new AuthorityKeys({
    experimentId: input.experimentId,
    publicKey: decodePublicKey(input.authorityPublicKey),
  }),
  pass: input.pass,
  refreshPass: () => Promise.resolve(input.pass),
  // Dials out only: nothing to listen on, no reachability to check.
  mode: "client",
  logger: pino({ level: "silent" }),
});
await node.start();
const transport = new GossipProgressTransport({
  pubsub: node.libp2p.services.pubsub,
  topic: progressTopic(input.experimentId),
  self: node.peerId,
  passes: node.passes,
  currentPass: () => node.passHolder.token(),
});
const tracker = new ProgressTracker({
  transport,
  targetBatchSize: 1,
  mode: () => "client",
  session: `claims${Date.now().toString(36)}`,
});
tracker.start();

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const say = (claim: string, epoch: number) => {
  process.stdout.write(`${JSON.stringify({ claim, epoch })}\n`);
};

let code = 0;
try {
  for (const address of input.addresses) await node.connect(address);
  // The swarm's epoch, from the trainers' records (two at least, so every check applies).
  const heardBy = Date.now() + 60_000;
  const trainers = () => tracker.records().filter((entry) => entry.role === "trainer");
  while (trainers().length < 2) {
    if (Date.now() > heardBy) throw new Error(`heard ${trainers().length} trainers within a minute`);
    await sleep(500);
  }
  const swarmEpoch = () => Math.max(...trainers().map((entry) => entry.record.epoch));

  const honest = { samplesAccumulated: 0, samplesPerSecond: 50 };
  tracker.report({ ...honest, epoch: swarmEpoch(), samplesTotal: 2 ** 47 });
  await tracker.pushNow();
  say("2^47 samples", swarmEpoch());
  const until = Date.now() + input.seconds * 1000;
  for (let k = 0; Date.now() < until; k++) {
    await sleep(1_000);
    const epoch = swarmEpoch();
    if (k % 2 === 0) {
      tracker.report({ ...honest, epoch: epoch + 1_000_000, lossSum: 0.001, minibatches: 1 });
      say("a step a million ahead", epoch + 1_000_000);
    } else {
      tracker.report({ ...honest, epoch, samplesPerSecond: 1e9 });
      say("10^9 samples/s", epoch);
    }
    await tracker.pushNow();
  }
} catch (error) {
  process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n`);
  code = 1;
} finally {
  tracker.stop();
  await node.stop();
}
process.exit(code);
