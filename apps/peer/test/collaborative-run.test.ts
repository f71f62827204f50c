import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startPlatformServer, type PlatformServer } from "../../web/test/support/platform-server.ts";
import { PeerCliProcess, writeEvents, type LogRecord } from "./support/peer-cli-process.ts";

/**
 * The volunteer's story on one machine: a running platform (real HTTP, database, signed passes and
 * dataset shards), three volunteers with their own tokens, each running `barnraise-peer` as its
 * own process. They train `mnist-mlp` together over real libp2p connections on loopback. One joins
 * late and must catch up from the others before it contributes; one is killed mid-run and the
 * others must carry on to the last step and reach 90 % test accuracy. A fourth volunteer stops
 * with Ctrl-C and leaves cleanly.
 */

// Enough steps that Dave's process start, state load and first step land well before the last
// step on a loaded machine (steps take about 0.3 s here).
const MAX_STEPS = 80;
const config = {
  model: { kind: "mnist-mlp" as const, hiddenUnits: [64] },
  // Steps of a few tenths of a second: long enough for a late joiner's state download to land before
  // the swarm has moved on (with steps of 0.1 s on a loaded machine, it may chase the swarm forever).
  training: { targetBatchSize: 4096, localBatchSize: 64, maxSteps: MAX_STEPS },
  optimizer: { name: "adam" as const, learningRate: 0.003 },
  averaging: { matchmakingTimeoutMs: 4_000, allreduceTimeoutMs: 6_000 },
};

let platform: PlatformServer;
let dir: string;
const peers: PeerCliProcess[] = [];

beforeAll(async () => {
  platform = await startPlatformServer({
    datasets: { names: ["mnist"], limit: 12_000, recordsPerShard: 1_000 },
  });
  dir = await mkdtemp(join(tmpdir(), "barnraise-run-"));
}, 120_000);

afterAll(async () => {
  for (const peer of peers) if (peer.running) peer.kill("SIGKILL");
  await Promise.all(peers.map((peer) => peer.exited));
  await platform.close();
  await rm(dir, { recursive: true, force: true });
});

const isStep = (step: number) => (record: LogRecord) =>
  record.msg.startsWith("step ") && typeof record.step === "number" && record.step >= step;

describe("three volunteers on loopback", () => {
  it("train mnist-mlp to 90 % test accuracy through a late join and a killed peer", async ({
    onTestFailed,
  }) => {
    // A failure names one peer's transcript; the others' tell what the swarm was doing meanwhile.
    onTestFailed(() => {
      writeEvents(peers);
    });
    const experiment = await platform.createExperiment(config);
    const start = async (name: string, bootstrap: readonly string[]) => {
      const { token } = await platform.addVolunteer(experiment.id, name);
      const peer = new PeerCliProcess(
        name,
        [
          "--server",
          platform.url.href,
          "--backend",
          "wasm",
          "--identity",
          join(dir, name, "identity.json"),
          "--data-dir",
          join(dir, name, "data"),
          "--listen",
          "/ip4/127.0.0.1/tcp/0",
          ...bootstrap.flatMap((address) => ["--peer", address]),
        ],
        // The token travels in the environment, as the CLI's help recommends.
        { BARNRAISE_TOKEN: token },
      );
      peers.push(peer);
      const listening = await peer.waitFor((r) => r.msg === "listening", "listening");
      return { peer, addresses: listening.addresses as string[] };
    };

    const alice = await start("alice", []);
    const bob = await start("bob", alice.addresses);
    // Alice trains alone until Bob arrives; then their rounds are averaged by a group of two.
    await bob.peer.waitFor((r) => r.msg === "first minibatch contributed", "first contribution");
    await alice.peer.waitFor((r) => isStep(1)(r) && r.groupSize === 2, "a round of two", 120_000);

    const carol = await start("carol", [...alice.addresses, ...bob.addresses]);
    const loaded = await carol.peer.waitFor(
      (r) => r.msg.startsWith("loaded the swarm's state"),
      "state load",
    );
    const first = await carol.peer.waitFor(
      (r) => r.msg === "first minibatch contributed",
      "first contribution",
    );
    expect(loaded.step).toBeGreaterThanOrEqual(2);
    expect(carol.peer.records.indexOf(loaded)).toBeLessThan(carol.peer.records.indexOf(first));
    const three = await alice.peer.waitFor(
      (r) => isStep(1)(r) && r.groupSize === 3,
      "a round of three",
      120_000,
    );
    await alice.peer.waitFor(isStep(Number(three.step) + 5), "five more steps", 120_000);

    // Bob's process dies without a word, possibly in the middle of a round.
    const killedAt = alice.peer.latestStep();
    bob.peer.kill("SIGKILL");
    await bob.peer.exited;

    // Dave joins too and leaves with Ctrl-C after his first step: he finishes that round, exits 0,
    // and Alice and Carol carry on.
    const dave = await start("dave", [...alice.addresses]);
    await dave.peer.waitFor(isStep(1), "dave's first step", 120_000);
    dave.peer.kill("SIGINT");
    expect((await dave.peer.exited).code).toBe(0);
    expect(dave.peer.records.some((r) => r.msg === "stopped training")).toBe(true);

    for (const { peer } of [alice, carol]) {
      const evaluated = await peer.waitFor(
        (r) => r.msg === "evaluated on the test split",
        "evaluation",
        240_000,
      );
      expect(evaluated.step).toBe(MAX_STEPS);
      expect(evaluated.accuracy).toBeGreaterThanOrEqual(0.9);
      expect((await peer.exited).code).toBe(0);
    }
    expect(killedAt).toBeLessThan(MAX_STEPS);
    // The survivors' last rounds were theirs alone.
    expect(alice.peer.records.filter(isStep(MAX_STEPS)).at(-1)?.groupSize).toBe(2);
  }, 420_000);
});
