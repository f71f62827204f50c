import { afterEach, describe, expect, it } from "vitest";
import {
  CollaborativeOptimizer,
  type CollaborativeOptimizerEvent,
} from "../src/optim/collaborative-optimizer.ts";
import { ParameterLayout } from "../src/optim/parameter-layout.ts";
import type { Swarm } from "../src/swarm.ts";
import type { TrainingState } from "../src/state/training-state.ts";
import { at } from "./support/at.ts";
import { eventually, TestAuthority } from "./support/swarm-fixtures.ts";
import { randomVector, seededRandom, startSwarm, type TestSwarmOptions } from "./support/swarm-harness.ts";

/**
 * The stall, in one process over real libp2p: after every trainer left, the aux peer's
 * progress record kept naming the last epoch it helped (324), so a new trainer saw the swarm
 * "ahead", tried to load newer state, found no donor and tried again forever, at step 0. No
 * combination of live and stale records may stall a peer.
 */

const SIZE = 24;
const LAYOUT = ParameterLayout.fromShapes([{ name: "w", shape: [SIZE] }]);
const config = {
  training: { targetBatchSize: 32 },
  optimizer: { name: "adam" as const, learningRate: 0.01 },
  averaging: { matchmakingTimeoutMs: 2_000, allreduceTimeoutMs: 8_000, chunkSizeBytes: 4096 },
  compression: { method: "none" as const },
};

const swarms: Swarm[] = [];
afterEach(async () => {
  await Promise.all(swarms.splice(0).map((swarm) => swarm.stop().catch(() => undefined)));
});

async function start(authority: TestAuthority, options: TestSwarmOptions = {}): Promise<Swarm> {
  const swarm = await startSwarm(authority, { config, ...options });
  swarms.push(swarm);
  return swarm;
}

/** A trainer's optimizer on `swarm`; `events` collects what it does. */
function trainerOn(swarm: Swarm, events: CollaborativeOptimizerEvent[] = []): CollaborativeOptimizer {
  const optimizer = new CollaborativeOptimizer({
    config: swarm.config,
    layout: LAYOUT,
    parameters: new Float32Array(SIZE),
    progress: swarm.progressPort(),
    averager: swarm.averagerPort(),
    state: swarm.statePort(),
  });
  optimizer.on((event) => events.push(event));
  return optimizer;
}

/**
 * Trains (minibatches of 8, a step every 4 when alone) until `done`, or fails after `timeoutMs`
 * saying where it stalled.
 */
async function trainUntil(
  optimizer: CollaborativeOptimizer,
  done: () => boolean,
  seed: number,
  timeoutMs: number,
): Promise<void> {
  const random = seededRandom(seed);
  const deadline = Date.now() + timeoutMs;
  while (!done()) {
    if (Date.now() > deadline) throw new Error(`stalled at epoch ${optimizer.epoch} for ${timeoutMs} ms`);
    optimizer.accumulate(randomVector(SIZE, random), 8);
    await optimizer.maybeStep();
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** Runs `train` for each optimizer, each with its own seed, and waits for all. */
async function trainAll(optimizers: readonly CollaborativeOptimizer[], epochs: number): Promise<void> {
  await Promise.all(
    optimizers.map((optimizer, k) => trainUntil(optimizer, () => optimizer.epoch >= epochs, 300 + k, 60_000)),
  );
}

function asTrainingState(optimizer: CollaborativeOptimizer): TrainingState {
  const { epoch, parameters, optimizer: state, generation, samples } = optimizer.exportState();
  return { epoch, parameters, optimizer: state, generation: generation ?? 0, samples: samples ?? 0 };
}

describe("no combination of live and stale records stalls a peer", () => {
  it("a new trainer loads the aux's checkpoint and steps past it after every trainer left", async () => {
    const authority = new TestAuthority();
    const served: { state: TrainingState | null } = { state: null };
    const aux = await start(authority, { mode: "aux", getState: () => served.state });
    const bootstrap = aux.node.multiaddrs();

    // Two trainers train to epoch 3; the aux keeps that state as its checkpoint.
    const optimizers: CollaborativeOptimizer[] = [];
    const stateOf = (k: number) => () =>
      optimizers[k] === undefined ? null : asTrainingState(at(optimizers, k));
    const first = await start(authority, { bootstrap, getState: stateOf(0) });
    const second = await start(authority, { bootstrap, getState: stateOf(1) });
    await eventually(
      () => [aux, first, second].every((swarm) => swarm.node.members().length === 2),
      "the first swarm is meshed",
      30_000,
    );
    optimizers.push(trainerOn(first), trainerOn(second));
    await trainAll(optimizers, 3);
    const checkpoint = asTrainingState(at(optimizers, 0));
    expect(checkpoint.epoch).toBe(3);
    expect(checkpoint.samples).toBeGreaterThanOrEqual(3 * 32);
    served.state = checkpoint;

    // Every trainer leaves; the aux's record still names the last round it helped, far ahead.
    await Promise.all([first.stop(), second.stop()]);
    aux.progress.report({ epoch: 324, samplesAccumulated: 0, samplesPerSecond: 0, stateEpoch: 3 });

    const newcomer = await start(authority, { bootstrap });
    await eventually(
      () => newcomer.progress.records().some((entry) => entry.record.stateEpoch === 3),
      "the newcomer hears from the aux",
      30_000,
    );
    const events: CollaborativeOptimizerEvent[] = [];
    const optimizer = trainerOn(newcomer, events);
    await trainUntil(optimizer, () => optimizer.epoch > 3, 400, 20_000);

    expect(events[0]).toEqual({ type: "state-loaded", epoch: 3, previousEpoch: 0 });
    expect(events.filter((event) => event.type === "step")).toEqual([
      expect.objectContaining({ epoch: 4, groupSize: 1 }),
    ]);
    // The swarm was never "ahead" of it: the aux's record is not the swarm's progress.
    expect(events.some((event) => event.type === "no-donor")).toBe(false);
    expect(newcomer.progress.global().epoch).toBe(4);
    expect(newcomer.progress.snapshot().alivePeers).toBe(1);
    expect(optimizer.runSamples).toBeGreaterThanOrEqual((checkpoint.samples ?? 0) + 32);
  }, 120_000);

  it("a new trainer steps on its own epoch beside a client far ahead that cannot give state, and so does the client", async () => {
    const authority = new TestAuthority();
    const newcomer = await start(authority);
    // Said at once, as the peer does at start: it is at epoch 0.
    newcomer.progress.report({ epoch: 0, samplesAccumulated: 0, samplesPerSecond: 0 });
    const client = await start(authority, { mode: "client", bootstrap: newcomer.node.multiaddrs() });
    await eventually(() => newcomer.node.members().length === 1, "the client connected", 30_000);

    // The client is far ahead (it resumed from a state of epoch 50) and trains.
    const ahead = trainerOn(client);
    ahead.importState({ ...ahead.exportState(), epoch: 50 });
    await trainUntil(ahead, () => ahead.epoch >= 51, 500, 20_000);
    await eventually(
      () => newcomer.progress.records().some((entry) => entry.record.epoch >= 51),
      "the newcomer sees the client ahead",
    );

    const events: CollaborativeOptimizerEvent[] = [];
    const optimizer = trainerOn(newcomer, events);
    const clientStart = ahead.epoch;
    await Promise.all([
      trainUntil(optimizer, () => optimizer.epoch >= 2, 600, 20_000),
      trainUntil(ahead, () => optimizer.epoch >= 2 && ahead.epoch >= clientStart + 2, 700, 30_000),
    ]);
    expect(events[0]).toMatchObject({ type: "no-donor", epoch: 0 });
    expect(events.filter((event) => event.type === "step").slice(0, 2)).toEqual([
      expect.objectContaining({ epoch: 1, groupSize: 1 }),
      expect.objectContaining({ epoch: 2, groupSize: 1 }),
    ]);
    expect(ahead.epoch).toBeGreaterThanOrEqual(clientStart + 2);
  }, 120_000);

  it("after a rollback, the trainers average together again at the epochs they had passed", async () => {
    const authority = new TestAuthority();
    const first = await start(authority);
    const second = await start(authority, { bootstrap: first.node.multiaddrs() });
    await eventually(() => first.node.members().length === 1, "the swarm is meshed", 30_000);
    const events: CollaborativeOptimizerEvent[][] = [[], []];
    const optimizers = [trainerOn(first, events[0]), trainerOn(second, events[1])];
    await trainAll(optimizers, 4);
    const checkpoint = asTrainingState(at(optimizers, 0));

    // The organizer rolls the run back to the state of epoch 2 (here the epoch-4 parameters stand
    // in for the checkpoint's: what matters is the epoch and the generation).
    for (const [k, optimizer] of optimizers.entries()) {
      optimizer.importState({ ...checkpoint, epoch: 2, generation: 1 });
      at(events, k).length = 0;
    }
    await trainAll(optimizers, 4);

    // Epochs 3 and 4 of the new generation are averaged by both, in new groups: the groups those
    // epochs had before the rollback are not handed out again.
    for (const log of events) {
      expect(log.filter((event) => event.type === "round-failed")).toEqual([]);
      expect(log.filter((event) => event.type === "step")).toEqual([
        expect.objectContaining({ epoch: 3, groupSize: 2 }),
        expect.objectContaining({ epoch: 4, groupSize: 2 }),
      ]);
    }
  }, 120_000);
});
