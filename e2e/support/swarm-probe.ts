/**
 * A bare swarm node for the lifecycle stories: it holds a pass the platform issued (passed in, not
 * fetched, so a story can keep a pass from before a ban or a revocation), dials each address it is
 * given, says hello like any peer, and prints one JSON line per address: whether that member
 * accepted it, and if not, why. It trains nothing.
 *
 *   node e2e/support/swarm-probe.ts < probe.json
 *
 * probe.json: { "experimentId", "authorityPublicKey" (base64url), "pass", "secretKey" (base64url,
 * the 64-byte Ed25519 secret key the pass was issued for), "addresses": [multiaddr with /p2p/…] }.
 * Exits 0 when every address answered (accepted or refused), 1 on bad input.
 */
import { text } from "node:stream/consumers";
import { decodePublicKey, fromBase64Url, keyPairFromSecretKey } from "@barnraise/protocol";
import { pino } from "pino";
import { z } from "zod";
import { SwarmNode } from "../../packages/swarm/src/p2p/swarm-node.ts";
import { AuthorityKeys } from "../../packages/swarm/src/platform/authority-keys.ts";

const inputSchema = z.strictObject({
  experimentId: z.string().min(1),
  authorityPublicKey: z.string(),
  pass: z.string().min(1),
  secretKey: z.string(),
  addresses: z.array(z.string().min(1)).min(1),
});

/**
 * How often to ask again when a member gave no answer: a member gates a refused peer for a few
 * seconds (its dial is dropped before any hello), and then says why it refuses.
 */
const ATTEMPTS = 8;
const RETRY_MS = 2_500;

async function ask(
  address: string,
): Promise<{ address: string; accepted: boolean; peer?: string; reason?: string }> {
  let reason = "";
  for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
    try {
      return { address, peer: await node.connect(address), accepted: true };
    } catch (error) {
      reason = error instanceof Error ? error.message : String(error);
      if (!/hello failed|cannot open|dial|timed out/i.test(reason)) break;
      await new Promise((resolve) => setTimeout(resolve, RETRY_MS));
    }
  }
  return { address, accepted: false, reason };
}

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
try {
  for (const address of input.addresses) {
    process.stdout.write(`${JSON.stringify(await ask(address))}\n`);
  }
} finally {
  await node.stop();
}
