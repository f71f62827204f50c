import { parseExperimentConfig, type ExperimentConfigInput } from "@barnraise/protocol";
import { describe, expect, it } from "vitest";
import {
  CollaborativeOptimizer,
  type CollaborativeOptimizerEvent,
} from "../../src/optim/collaborative-optimizer.ts";
import { ParameterLayout } from "../../src/optim/parameter-layout.ts";
import type { EpochState } from "../../src/optim/ports.ts";
import { stateDigest } from "../../src/state/state-digest.ts";
import { FakeState, FakeSwarm } from "../support/fake-swarm.ts";
import { seededRandom } from "../support/seeded-random.ts";

/**
 * A peer's solo steps (steps with no other trainer's samples in them), its state fingerprint, and
 * going back to the last state it shared (`dropSoloSteps`), against the in-process FakeSwarm.
 *
 * Two peers share one FakeSwarm of two: a step where both put samples in is shared; a step where
 * only peer 0 does is solo for it (the group's weight is its own), while peer 1, whose weight 0
 * meets peer 0's samples, has a shared one.
 */

const layout = ParameterLayout.fromShapes([
  { name: "kernel", shape: [3, 4] },
  { name: "bias", shape: [4] },
]);

function config(overrides: ExperimentConfigInput = {}) {
  return parseExperimentConfig(overrides);
}

/** Deterministic integers in [0, 2^32). */
function random(seed: number): () => number {
  const next = seededRandom(seed);
  return () => next() * 4294967296;
}

/** A gradient of multiples of 1/64 in [-1, 1]. */
function dyadicGradient(seed: number): Float32Array {
  const next = random(seed);
  return Float32Array.from({ length: layout.size }, () => ((next() % 129) - 64) / 64);
}

function initialParameters(): Float32Array {
  const next = random(99);
  return Float32Array.from({ length: layout.size }, () => ((next() % 2001) - 1000) / 1000);
}

function bits(vector: Float32Array): Uint32Array {
  return new Uint32Array(vector.buffer.slice(vector.byteOffset, vector.byteOffset + vector.byteLength));
}

/** A peer whose solo steps are private (it is cut off), unless a test says otherwise. */
function peer(swarm: FakeSwarm, index: number, cfg = config()) {
  const optimizer = new CollaborativeOptimizer({
    config: cfg,
    layout,
    parameters: initialParameters(),
    progress: swarm.progress(index),
    averager: swarm.averager(index),
    state: new FakeState(),
  });
  optimizer.treatSoloStepsAsPrivate(() => true);
  return optimizer;
}

let seed = 0;

/**
 * One collaborative step: peer i accumulates `samples[i]` samples (none when 0), then every peer
 * steps; with delayed updates, the background rounds are awaited too.
 */
async function step(peers: readonly CollaborativeOptimizer[], samples: readonly number[]): Promise<void> {
  peers.forEach((optimizer, i) => {
    const count = samples[i] ?? 0;
    if (count > 0) optimizer.accumulate(dyadicGradient(++seed), count);
  });
  expect(await Promise.all(peers.map((optimizer) => optimizer.maybeStep()))).toEqual(peers.map(() => true));
  await Promise.all(peers.map((optimizer) => optimizer.pendingStep() ?? Promise.resolve()));
}

const SHARED = [8, 8];
const SOLO = [16, 0];

/** A deep copy, so that nothing the optimizer keeps can change what the test compares with. */
function snapshot(state: EpochState): EpochState {
  return structuredClone(state);
}

const strategies = [
  ["dedloc", config()],
  ["dedloc with delayed parameter updates", config({ averaging: { delayedParameterUpdates: true } })],
  ["diloco", config({ averaging: { strategy: "diloco" } })],
  [
    "diloco with delayed parameter updates",
    config({ averaging: { strategy: "diloco", delayedParameterUpdates: true } }),
  ],
] as const;

describe("CollaborativeOptimizer solo steps", () => {
  it.each(strategies)(
    "%s: dropSoloSteps goes back to the last shared state, bit for bit, with its digest",
    async (_name, cfg) => {
      const swarm = new FakeSwarm(2, 16);
      const [a, b] = [peer(swarm, 0, cfg), peer(swarm, 1, cfg)];
      const peers = [a, b];
      await step(peers, SHARED);
      await step(peers, SHARED);
      expect([a.soloSteps, b.soloSteps]).toEqual([0, 0]);
      expect(a.epoch).toBe(2);
      const shared = snapshot(a.exportState());
      const sharedHash = a.stateHash;
      expect(sharedHash).toEqual({ epoch: 2, digest: stateDigest(shared.parameters) });

      const events: CollaborativeOptimizerEvent[] = [];
      a.on((event) => events.push(event));
      for (let i = 0; i < 3; i++) await step(peers, SOLO);
      expect(a.soloSteps).toBe(3);
      // Peer 1's zero weight met peer 0's samples: its steps were shared.
      expect(b.soloSteps).toBe(0);
      expect(events.map((event) => event.type === "step" && event.soloSteps)).toEqual([1, 2, 3]);
      expect(a.epoch).toBe(5);
      expect(a.stateHash).toEqual({ epoch: 5, digest: stateDigest(a.parameters) });
      expect(a.stateHash.digest).not.toBe(sharedHash.digest);
      expect(bits(a.parameters)).not.toEqual(bits(shared.parameters));
      expect(swarm.reports.get(0)).toMatchObject({ soloSteps: 3, stateHash: a.stateHash });

      const workingVersion = a.workingVersion;
      a.accumulate(dyadicGradient(++seed), 4); // half a minibatch toward the next step, dropped too
      expect(a.dropSoloSteps()).toBe(2);
      expect(a.epoch).toBe(2);
      expect(a.soloSteps).toBe(0);
      expect(a.samplesAccumulated).toBe(0);
      expect(bits(a.parameters)).toEqual(bits(shared.parameters));
      // The model computes at the shared state again (diloco's local copy starts over from it).
      expect(bits(a.workingParameters)).toEqual(bits(shared.parameters));
      expect(a.workingVersion).not.toBe(workingVersion);
      expect(a.stateHash).toEqual(sharedHash);
      expect(a.stateHash).toEqual({ epoch: 2, digest: stateDigest(a.parameters) });
      // The optimizer's state and the run's sample counter are those of the shared state too.
      expect(a.exportState()).toEqual(shared);
      expect(a.runSamples).toBe(32);
      // The aux hears the shared state's fingerprint and no solo steps.
      expect(swarm.reports.get(0)).toMatchObject({
        epoch: 2,
        samplesAccumulated: 0,
        soloSteps: 0,
        stateHash: sharedHash,
      });
      expect(swarm.reports.get(0)).not.toHaveProperty("averagingEpoch");

      // Nothing is left to drop: a second call changes nothing.
      expect(a.dropSoloSteps()).toBeUndefined();
      expect(a.exportState()).toEqual(shared);
    },
  );

  it.each(strategies)("%s: returns undefined and changes nothing without solo steps", async (_name, cfg) => {
    const swarm = new FakeSwarm(2, 16);
    const [a, b] = [peer(swarm, 0, cfg), peer(swarm, 1, cfg)];
    expect(a.dropSoloSteps()).toBeUndefined();
    expect(a.stateHash).toEqual({ epoch: 0, digest: stateDigest(initialParameters()) });
    await step([a, b], SHARED);
    await step([a, b], SHARED);
    a.accumulate(dyadicGradient(++seed), 4);
    const before = snapshot(a.exportState());
    const hash = a.stateHash;
    expect(a.dropSoloSteps()).toBeUndefined();
    expect(a.exportState()).toEqual(before);
    expect(a.stateHash).toBe(hash);
    expect(a.epoch).toBe(2);
    expect(a.samplesAccumulated).toBe(4);
  });

  it("goes back only to the latest shared step: a shared step between solo ones moves the start point", async () => {
    const swarm = new FakeSwarm(2, 16);
    const [a, b] = [peer(swarm, 0), peer(swarm, 1)];
    await step([a, b], SOLO);
    await step([a, b], SOLO);
    expect(a.soloSteps).toBe(2);
    await step([a, b], SHARED);
    expect(a.soloSteps).toBe(0);
    // Right after a shared step there is nothing to drop.
    expect(a.dropSoloSteps()).toBeUndefined();
    expect(a.epoch).toBe(3);
    const shared = snapshot(a.exportState());
    const sharedHash = a.stateHash;
    await step([a, b], SOLO);
    await step([a, b], SOLO);
    expect(a.soloSteps).toBe(2);
    expect(a.dropSoloSteps()).toBe(3);
    expect(bits(a.parameters)).toEqual(bits(shared.parameters));
    expect(a.exportState()).toEqual(shared);
    expect(a.stateHash).toEqual(sharedHash);
  });

  it("goes back to the initial state when every step so far was taken alone", async () => {
    const lonely = new FakeSwarm(1, 16);
    const c = peer(lonely, 0);
    for (let i = 0; i < 4; i++) await step([c], [16]);
    expect(c.soloSteps).toBe(4);
    expect(c.dropSoloSteps()).toBe(0);
    expect(bits(c.parameters)).toEqual(bits(initialParameters()));
    expect(c.stateHash).toEqual({ epoch: 0, digest: stateDigest(initialParameters()) });
    expect(c.runSamples).toBe(0);
  });

  it("forgets the start point when the swarm's state is loaded, and takes the loaded one after it", async () => {
    const swarm = new FakeSwarm(2, 16);
    const [a, b] = [peer(swarm, 0), peer(swarm, 1)];
    await step([a, b], SHARED);
    await step([a, b], SOLO);
    expect(a.soloSteps).toBe(1);
    // It loads someone's state of step 6: its own solo step is gone, nothing to drop.
    const loaded: EpochState = {
      ...snapshot(b.exportState()),
      epoch: 6,
      parameters: dyadicGradient(77),
      samples: 96,
    };
    a.importState(loaded);
    expect(a.soloSteps).toBe(0);
    expect(a.stateHash).toEqual({ epoch: 6, digest: stateDigest(loaded.parameters) });
    expect(a.dropSoloSteps()).toBeUndefined();
    expect(bits(a.parameters)).toEqual(bits(loaded.parameters));
    // Alone again from there: dropping goes back to the loaded state, not to anything before it.
    b.importState(loaded);
    await step([a, b], SOLO);
    await step([a, b], SOLO);
    expect(a.soloSteps).toBe(2);
    expect(a.dropSoloSteps()).toBe(6);
    expect(bits(a.parameters)).toEqual(bits(loaded.parameters));
    expect(a.stateHash).toEqual({ epoch: 6, digest: stateDigest(loaded.parameters) });
    expect(a.runSamples).toBe(96);
  });

  it("with delayed updates, discards a solo round still in flight when it drops the solo steps", async () => {
    const dpu = config({ averaging: { delayedParameterUpdates: true } });
    const swarm = new FakeSwarm(2, 16);
    const [a, b] = [peer(swarm, 0, dpu), peer(swarm, 1, dpu)];
    await step([a, b], SHARED);
    const shared = snapshot(a.exportState());
    await step([a, b], SOLO);
    await step([a, b], SOLO);
    expect(a.soloSteps).toBe(2);
    // A third solo round starts and is held in the background.
    swarm.manual = true;
    a.accumulate(dyadicGradient(++seed), 16);
    expect(await Promise.all([a.maybeStep(), b.maybeStep()])).toEqual([true, true]);
    expect(a.epoch).toBe(4);
    expect(a.pendingStep()).not.toBeNull();
    expect(a.dropSoloSteps()).toBe(1);
    swarm.release(3);
    await Promise.all([a.pendingStep(), b.pendingStep()]);
    // The round's result did not land on the restored state.
    expect(a.epoch).toBe(1);
    expect(a.soloSteps).toBe(0);
    expect(a.exportState()).toEqual(shared);
    expect(a.stateHash).toEqual({ epoch: 1, digest: stateDigest(shared.parameters) });
  });
});

describe("treatSoloStepsAsPrivate", () => {
  it("keeps nothing to drop while solo steps are the run's, and goes back only over the private ones", async () => {
    const swarm = new FakeSwarm(2, 16);
    const peers = [peer(swarm, 0), peer(swarm, 1)];
    const [a] = peers as [CollaborativeOptimizer, CollaborativeOptimizer];
    let isPrivate = false;
    a.treatSoloStepsAsPrivate(() => isPrivate);
    await step(peers, SHARED);
    // A lone volunteer in touch with the swarm: its solo steps are the run's.
    await step(peers, SOLO);
    await step(peers, SOLO);
    expect(a.soloSteps).toBe(2);
    expect(a.dropSoloSteps()).toBeUndefined();
    const runs = { epoch: a.epoch, parameters: bits(a.parameters), digest: a.stateHash.digest };
    // Cut off: the next solo steps are its own, and only those are dropped.
    isPrivate = true;
    await step(peers, SOLO);
    await step(peers, SOLO);
    expect(a.soloSteps).toBe(4);
    expect(a.dropSoloSteps()).toBe(runs.epoch);
    expect(a.epoch).toBe(runs.epoch);
    expect(bits(a.parameters)).toEqual(runs.parameters);
    expect(a.stateHash).toEqual({ epoch: runs.epoch, digest: runs.digest });
    expect(a.soloSteps).toBe(0);
  });

  it("forgets where private steps began once a solo step is the run's again", async () => {
    const swarm = new FakeSwarm(2, 16);
    const peers = [peer(swarm, 0), peer(swarm, 1)];
    const [a] = peers as [CollaborativeOptimizer, CollaborativeOptimizer];
    let isPrivate = true;
    a.treatSoloStepsAsPrivate(() => isPrivate);
    await step(peers, SHARED);
    await step(peers, SOLO);
    isPrivate = false;
    await step(peers, SOLO);
    expect(a.dropSoloSteps()).toBeUndefined();
    expect(a.soloSteps).toBe(2);
  });
});

describe("a private step's samples", () => {
  it("are no contribution, while a lone volunteer's steps (the run's) are", async () => {
    const run = async (isPrivate: boolean) => {
      const swarm = new FakeSwarm(1, 16);
      const optimizer = new CollaborativeOptimizer({
        config: config(),
        layout,
        parameters: initialParameters(),
        progress: swarm.progress(0),
        // Alone in the swarm, as the averager says when it sees no other trainer.
        averager: {
          average: (_epoch: number, vector: Float32Array, weight: number) =>
            Promise.resolve({ vector: vector.slice(), groupSize: 1, totalWeight: weight, soleTrainer: true }),
        },
        state: new FakeState(),
      });
      optimizer.treatSoloStepsAsPrivate(() => isPrivate);
      const events: CollaborativeOptimizerEvent[] = [];
      optimizer.on((event) => events.push(event));
      optimizer.accumulate(dyadicGradient(++seed), 16);
      expect(await optimizer.maybeStep()).toBe(true);
      return events.flatMap((event) => (event.type === "step" ? [event.shared] : []));
    };
    expect(await run(false)).toEqual([true]);
    expect(await run(true)).toEqual([false]);
  });
});
