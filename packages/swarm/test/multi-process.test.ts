/**
 * Real peers in separate Node processes on loopback: what one process with many swarms cannot show
 * (separate event loops, a process dying with SIGKILL and its sockets reset by the kernel).
 */
import { generateKeyPair, toBase64Url } from "@barnraise/protocol";
import { afterEach, describe, expect, it } from "vitest";
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

type Averaged = Extract<PeerEvent, { event: "averaged" }>;

const LENGTH = 20_000;
const EPOCHS = [1, 2, 3];

const running: PeerProcess[] = [];
afterEach(async () => {
  await Promise.all(running.splice(0).map((peer) => peer.stop("SIGKILL")));
});

/** What peer k averages at `epoch`: a distinct seeded vector and weight. */
function entryFor(k: number, epoch: number): PeerProcessOptions["script"]["epochs"][number] {
  return {
    epoch,
    vector: { seed: 1000 * epoch + k, length: LENGTH },
    weight: 1 + ((k * 7 + epoch * 3) % 11),
  };
}

function startPeer(authority: TestAuthority, k: number, bootstrap: string[]): PeerProcess {
  const identity = generateKeyPair();
  const peer = PeerProcess.spawn({
    secretKey: toBase64Url(identity.secretKey),
    pass: authority.pass(identity, { username: `proc-${k}` }),
    authorityPublicKey: toBase64Url(authority.keyPair.publicKey),
    experimentId: authority.experimentId,
    mode: "node",
    listen: ["/ip4/127.0.0.1/tcp/0"],
    bootstrap,
    config: testConfig,
    script: { epochs: EPOCHS.map((epoch) => entryFor(k, epoch)) },
  });
  running.push(peer);
  return peer;
}

/** The test's own float64 weighted mean of what peers `ks` average at `epoch`. */
function expectedMean(ks: readonly number[], epoch: number): { mean: Float64Array; totalWeight: number } {
  const entries = ks.map((k) => entryFor(k, epoch));
  const vectors = entries.map((entry) => randomVector(entry.vector.length, seededRandom(entry.vector.seed)));
  const weights = entries.map((entry) => entry.weight);
  return {
    mean: weightedMean(vectors, weights),
    totalWeight: weights.reduce((sum, weight) => sum + weight, 0),
  };
}

/** Syncs progress at `epoch` on every peer, then has them all average; failed peers retry up to `retries` times. */
async function averageEpoch(peers: readonly PeerProcess[], epoch: number, retries = 0): Promise<Averaged[]> {
  await Promise.all(
    peers
      .map((peer) => peer.command(`sync ${epoch} ${peers.length - 1}`, on.answer("synced", "sync")))
      .map(async (answer) => {
        const event = await answer;
        if (event.event === "failed") throw new Error(`sync failed: ${event.message}`);
      }),
  );
  const results = new Map<PeerProcess, Averaged>();
  let failures: string[] = [];
  for (let attempt = 0; attempt <= retries; attempt += 1) {
    const pending = peers.filter((peer) => !results.has(peer));
    if (pending.length === 0) break;
    const answers = await Promise.all(
      pending.map(async (peer) => ({
        peer,
        answer: await peer.command(`go ${epoch}`, on.answer("averaged", "go"), 25_000),
      })),
    );
    failures = [];
    for (const { peer, answer } of answers) {
      if (answer.event === "averaged") results.set(peer, answer);
      else failures.push(`${answer.code}: ${answer.message}`);
    }
  }
  if (failures.length > 0)
    throw new Error(`epoch ${epoch}: ${failures.length} peers failed: ${failures.join("; ")}`);
  return [...results.values()];
}

function expectCorrect(results: readonly Averaged[], ks: readonly number[], epoch: number): void {
  const { mean, totalWeight } = expectedMean(ks, epoch);
  expect(results.length).toBe(ks.length);
  // Bit-identical in every process.
  expect(new Set(results.map((result) => result.checksum)).size).toBe(1);
  for (const result of results) {
    expect(result.groupSize).toBe(ks.length);
    expect(result.totalWeight).toBe(totalWeight);
    const vector = decodeVector(result.vector);
    expect(vector.length).toBe(LENGTH);
    expect(maxAbsDifference(vector, mean)).toBeLessThan(1e-6);
  }
}

describe("Swarm across processes (loopback)", () => {
  it("averages 4 processes for two epochs, then 3 after one is killed with SIGKILL", async () => {
    const authority = new TestAuthority("exp-multiproc");
    const first = startPeer(authority, 0, []);
    const bootstrap = (await first.waitFor(on.ready)).addrs;
    const victim = startPeer(authority, 1, bootstrap);
    const second = startPeer(authority, 2, bootstrap);
    await Promise.all([first, victim, second].map((peer) => peer.waitFor(on.members(2))));
    // The last one knows only the bootstrap peer and finds the rest through its hello answer.
    const last = startPeer(authority, 3, bootstrap);
    const peers = [first, victim, second, last];
    await Promise.all(peers.map((peer) => peer.waitFor(on.members(3))));

    for (const epoch of [1, 2]) expectCorrect(await averageEpoch(peers, epoch), [0, 1, 2, 3], epoch);

    const victimId = (await victim.waitFor(on.ready)).peerId;
    const alive = [first, second, last];
    const killedAt = alive.map((peer) => ({ peer, from: peer.watch.lines.length }));
    await victim.stop("SIGKILL");
    await Promise.all(
      killedAt.map(({ peer, from }) =>
        peer.waitFor(
          (event): event is Extract<PeerEvent, { event: "members" }> =>
            event.event === "members" && !event.peers.includes(victimId) && event.count === 2,
          10_000,
          from,
        ),
      ),
    );
    expectCorrect(await averageEpoch(alive, 3, 1), [0, 2, 3], 3);

    // SIGTERM stops each swarm cleanly.
    for (const outcome of await Promise.all(alive.map((peer) => peer.stop("SIGTERM")))) {
      expect(outcome).toMatchObject({ code: 0, signal: null });
    }
  }, 60_000);
});
