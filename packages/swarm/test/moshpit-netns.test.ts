/**
 * Moshpit averaging among 16 peer processes, each in its own network namespace on a shaped link
 * (netlab: needs root like CI, and fails, never skips, when the machine cannot run a lab). With
 * `maxGroupSize` 4, Appendix C's group size for 16 trainers is 4, so each step is a 4×4 grid: two
 * rounds of four cells of four. The matchmaking deadline (60 s) is far longer than a step takes, so
 * only complete cells close; after each step every peer holds the global weighted mean of the 16
 * vectors (exact codec: within float32 rounding), and the members of each last-round cell hold
 * bit-identical results.
 */
import { generateKeyPair, peerIdFromEd25519PublicKey, toBase64Url } from "@barnraise/protocol";
import { NetLab, netlabAvailable, type Host } from "@barnraise/netlab";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { planGrid } from "../src/averaging/moshpit-grid.ts";
import { at } from "./support/at.ts";
import {
  decodeVector,
  on,
  PeerProcess,
  type PeerEvent,
  type PeerProcessOptions,
} from "./support/peer-process.ts";
import { TestAuthority } from "./support/swarm-fixtures.ts";
import {
  maxAbsDifference,
  randomVector,
  seededRandom,
  testConfig,
  weightedMean,
} from "./support/swarm-harness.ts";

const PEERS = 16;
const GROUP_SIZE = 4;
const LENGTH = 20_000;
const EPOCHS = [1, 2, 3] as const;
const MBIT = 50;
/** One-way delay on each link: 10 ms between two peers, a 20 ms round trip. */
const DELAY_MS = 5;
const config = {
  ...testConfig,
  averaging: {
    ...testConfig.averaging,
    maxGroupSize: GROUP_SIZE,
    matchmakingTimeoutMs: 60_000,
    allreduceTimeoutMs: 60_000,
  },
};

type Averaged = Extract<PeerEvent, { event: "averaged" }>;

const authority = new TestAuthority("exp-moshpit-netns");
let lab: NetLab | undefined;
const peers: PeerProcess[] = [];
/** Each peer's PeerId, by index. */
const ids: string[] = [];

/** What peer k averages at `epoch`: a distinct seeded vector, and a weight that changes per step. */
function entryFor(k: number, epoch: number): PeerProcessOptions["script"]["epochs"][number] {
  return {
    epoch,
    vector: { seed: 1000 * epoch + k, length: LENGTH },
    weight: 1 + ((k * 7 + epoch * 5) % 13),
  };
}

function startPeer(host: Host, k: number, bootstrap: string[]): PeerProcess {
  const identity = generateKeyPair();
  ids[k] = peerIdFromEd25519PublicKey(identity.publicKey).toString();
  const peer = PeerProcess.spawn(
    {
      secretKey: toBase64Url(identity.secretKey),
      pass: authority.pass(identity, { username: `moshpit-${k}` }),
      authorityPublicKey: toBase64Url(authority.keyPair.publicKey),
      experimentId: authority.experimentId,
      mode: "node",
      listen: [`/ip4/${host.address}/tcp/0`],
      bootstrap,
      config,
      progressIntervalMs: 1_000,
      script: { epochs: EPOCHS.map((epoch) => entryFor(k, epoch)) },
    },
    (file, args, init) => host.spawnNode(file, args, init),
  );
  peers[k] = peer;
  return peer;
}

/** Every peer reports `epoch` and waits until it sees all the others there; then all average it. */
async function step(epoch: number): Promise<Averaged[]> {
  await Promise.all(
    peers.map(async (peer) => {
      const synced = await peer.command(`sync ${epoch} ${PEERS - 1}`, on.answer("synced", "sync"), 30_000);
      if (synced.event !== "synced") throw new Error(`sync ${epoch} failed: ${JSON.stringify(synced)}`);
    }),
  );
  return Promise.all(
    peers.map(async (peer, k) => {
      const answer = await peer.command(`go ${epoch}`, on.answer("averaged", "go"), 120_000);
      if (answer.event !== "averaged") {
        throw new Error(`peer ${k} failed to average epoch ${epoch}: ${JSON.stringify(answer)}`);
      }
      return answer;
    }),
  );
}

describe("Moshpit averaging among 16 peer processes on shaped links (netlab)", () => {
  beforeAll(async () => {
    const available = await netlabAvailable();
    if (!available.ok) throw new Error(`netlab cannot run on this machine: ${available.reason}`);
    lab = await NetLab.create();
    const created = lab;
    const hosts = await Promise.all(
      Array.from({ length: PEERS }, (_, k) =>
        created.addHost({ name: `p${k}`, uploadMbit: MBIT, downloadMbit: MBIT, delayMs: DELAY_MS }),
      ),
    );
    const first = startPeer(at(hosts, 0), 0, []);
    const address = at((await first.waitFor(on.ready, 30_000)).addrs, 0);
    for (let k = 1; k < PEERS; k++) startPeer(at(hosts, k), k, [address]);
    await Promise.all(peers.map((peer) => peer.waitFor(on.members(PEERS - 1), 90_000)));
  }, 150_000);

  afterAll(async () => {
    await Promise.all(peers.splice(0).map((peer) => peer.stop("SIGKILL")));
    await lab?.destroy();
  });

  it("averages three steps in a 4×4 grid: every peer ends each step with the global weighted mean", async () => {
    const plan = planGrid(ids, GROUP_SIZE);
    expect(plan.radices).toEqual([4, 4]);
    const started = performance.now();
    for (const epoch of EPOCHS) {
      const stepStarted = performance.now();
      const results = await step(epoch);
      const seconds = (performance.now() - stepStarted) / 1000;
      process.stdout.write(
        `moshpit-netns: epoch ${epoch} averaged by all ${PEERS} in ${seconds.toFixed(1)} s\n`,
      );

      const entries = ids.map((_, k) => entryFor(k, epoch));
      const vectors = entries.map(({ vector }) => randomVector(vector.length, seededRandom(vector.seed)));
      const weights = entries.map(({ weight }) => weight);
      const expected = weightedMean(vectors, weights);
      const totalWeight = weights.reduce((sum, weight) => sum + weight, 0);
      /** Each last-round cell's result, which its members share bit for bit. */
      const cellChecksums = new Map<string, string>();
      results.forEach((result, k) => {
        expect(result).toMatchObject({
          epoch,
          radices: [4, 4],
          rounds: 2,
          groupSize: GROUP_SIZE,
          totalWeight,
          exclusions: [],
        });
        expect(maxAbsDifference(decodeVector(result.vector), expected)).toBeLessThan(1e-5);
        const cell = plan.cellOf(at(ids, k), 1)?.join(".") ?? "none";
        const checksum = cellChecksums.get(cell) ?? result.checksum;
        cellChecksums.set(cell, checksum);
        expect(result.checksum, `peer ${k} against its last-round cell ${cell}`).toBe(checksum);
      });
      // Well within the 60 s matchmaking deadline: every cell closed because it was complete.
      expect(seconds).toBeLessThan(45);
    }
    expect((performance.now() - started) / 1000).toBeLessThan(120);
  }, 240_000);
});
