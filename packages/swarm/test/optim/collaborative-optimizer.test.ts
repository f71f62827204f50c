import { parseExperimentConfig, type ExperimentConfigInput } from "@barnraise/protocol";
import { describe, expect, it } from "vitest";
import { SwarmError, SwarmErrorCode } from "../../src/errors.ts";
import {
  CollaborativeOptimizer,
  type CollaborativeOptimizerEvent,
} from "../../src/optim/collaborative-optimizer.ts";
import { createFlatOptimizer } from "../../src/optim/create-flat-optimizer.ts";
import { STATE_DIGEST_PATTERN, stateDigest } from "../../src/state/state-digest.ts";
import { ParameterLayout } from "../../src/optim/parameter-layout.ts";
import { at } from "../support/at.ts";
import { FakeState, FakeSwarm } from "../support/fake-swarm.ts";
import { seededRandom } from "../support/seeded-random.ts";

/** Deterministic integers in [0, 2^32). */
function random(seed: number): () => number {
  const next = seededRandom(seed);
  return () => next() * 4294967296;
}

// ---- Helpers.

const layout = ParameterLayout.fromShapes([
  { name: "kernel", shape: [4, 6] },
  { name: "bias", shape: [6] },
  { name: "out", shape: [6, 2] },
]);

function config(overrides: ExperimentConfigInput = {}) {
  return parseExperimentConfig(overrides);
}

/** A gradient of multiples of 1/64 in [-1, 1]: sums and power-of-two divisions of these are exact. */
function dyadicGradient(seed: number): Float32Array {
  const next = random(seed);
  return Float32Array.from({ length: layout.size }, () => ((next() % 129) - 64) / 64);
}

function initialParameters(): Float32Array {
  const next = random(99);
  return Float32Array.from({ length: layout.size }, () => ((next() % 2001) - 1000) / 1000);
}

/** Lets pending promise callbacks run until `condition` holds. */
async function until(condition: () => boolean): Promise<void> {
  for (let i = 0; i < 100 && !condition(); i++) await Promise.resolve();
  expect(condition()).toBe(true);
}

function bits(vector: Float32Array): Uint32Array {
  return new Uint32Array(vector.buffer.slice(vector.byteOffset, vector.byteOffset + vector.byteLength));
}

function peer(swarm: FakeSwarm, index: number, cfg = config(), state = new FakeState(), now?: () => number) {
  return new CollaborativeOptimizer({
    config: cfg,
    layout,
    parameters: initialParameters(),
    progress: swarm.progress(index),
    averager: swarm.averager(index),
    state,
    ...(now === undefined ? {} : { now }),
  });
}

/** Minibatches per peer: [count, size]; each peer's total is a power of two; the last peer has none. */
const plan: readonly (readonly [number, number])[] = [
  [1, 4],
  [2, 4],
  [2, 8],
  [4, 8],
  [1, 16],
  [4, 4],
  [8, 2],
  [0, 0],
];
const perEpoch = plan.reduce((sum, [count, size]) => sum + count * size, 0);

describe("CollaborativeOptimizer with 8 peers", () => {
  it.each([
    [
      "adam",
      { optimizer: { name: "adam", learningRate: 0.01 }, training: {} },
      [0.01, 0.01, 0.01, 0.01, 0.01],
    ],
    [
      "lamb, warm-up and clipping",
      {
        optimizer: { name: "lamb", learningRate: 0.02 },
        training: { warmupSteps: 4, gradientClipNorm: 0.5 },
      },
      [0.005, 0.01, 0.015, 0.02, 0.02],
    ],
    [
      "adamw, warm-up 2",
      { optimizer: { name: "adam", learningRate: 0.01, weightDecay: 0.1 }, training: { warmupSteps: 2 } },
      [0.005, 0.01, 0.01, 0.01, 0.01],
    ],
  ] as const)(
    "%s: every peer ends with the bits of one optimizer fed the global batch",
    async (_n, input, rates) => {
      const cfg = config(input);
      const swarm = new FakeSwarm(8, perEpoch);
      const peers = plan.map((_, index) => peer(swarm, index, cfg));
      const steps: CollaborativeOptimizerEvent[] = [];
      peers[3]?.on((event) => steps.push(event));

      const reference = createFlatOptimizer(cfg.optimizer, layout);
      const referenceParameters = initialParameters();
      for (let epoch = 0; epoch < rates.length; epoch++) {
        const globalSum = new Float64Array(layout.size);
        plan.forEach(([count, size], index) => {
          for (let b = 0; b < count; b++) {
            const gradient = dyadicGradient(epoch * 1000 + index * 10 + b);
            peers[index]?.accumulate(gradient, size);
            gradient.forEach((g, i) => (globalSum[i] = (globalSum[i] ?? 0) + g * size));
          }
        });
        expect(await Promise.all(peers.map((p) => p.maybeStep()))).toEqual(plan.map(() => true));

        const globalMean = Float32Array.from(globalSum, (sum) => sum / perEpoch);
        const clip = cfg.training.gradientClipNorm;
        const norm = Math.sqrt(globalMean.reduce((sum, g) => sum + g * g, 0));
        if (clip !== undefined && norm > clip)
          globalMean.forEach((g, i) => (globalMean[i] = g * (clip / norm)));
        reference.step(referenceParameters, globalMean, rates[epoch] ?? Number.NaN);
      }
      for (const p of peers) {
        expect(p.epoch).toBe(rates.length);
        expect(p.samplesAccumulated).toBe(0);
        expect(bits(p.parameters)).toEqual(bits(referenceParameters));
      }
      expect(bits(referenceParameters)).not.toEqual(bits(initialParameters()));
      expect(
        steps.map(
          (e) => e.type === "step" && [e.epoch, e.groupSize, e.totalWeight, e.localSamples, e.shared],
        ),
      ).toEqual(rates.map((_, epoch) => [epoch + 1, 8, perEpoch, 32, true]));
      const clip = cfg.training.gradientClipNorm;
      if (clip !== undefined) {
        // Clipping was active: the averaged gradient was longer than the bound at every step.
        for (const event of steps) expect(event.type === "step" && event.gradientNorm).toBeGreaterThan(clip);
      }
    },
  );
});

describe("CollaborativeOptimizer", () => {
  it("waits for the target batch", async () => {
    const swarm = new FakeSwarm(2, 64);
    const [a, b] = [peer(swarm, 0), peer(swarm, 1)];
    a.accumulate(dyadicGradient(1), 32);
    b.accumulate(dyadicGradient(2), 16);
    expect(await a.maybeStep()).toBe(false);
    b.accumulate(dyadicGradient(3), 16);
    expect(await Promise.all([a.maybeStep(), b.maybeStep()])).toEqual([true, true]);
    expect(bits(a.parameters)).toEqual(bits(b.parameters));
  });

  it("publishes one state digest per step on every member, and another for a model trained alone", async () => {
    const swarm = new FakeSwarm(2, 32);
    const [a, b] = [peer(swarm, 0), peer(swarm, 1)];
    expect(a.stateHash).toEqual({ epoch: 0, digest: stateDigest(initialParameters()) });
    const shared: string[] = [];
    for (let epoch = 0; epoch < 3; epoch++) {
      a.accumulate(dyadicGradient(10 + epoch), 16);
      b.accumulate(dyadicGradient(20 + epoch), 16);
      expect(await Promise.all([a.maybeStep(), b.maybeStep()])).toEqual([true, true]);
      expect(a.stateHash).toEqual(b.stateHash);
      expect(a.stateHash).toEqual({ epoch: epoch + 1, digest: stateDigest(a.parameters) });
      expect(swarm.reports.get(1)?.stateHash).toEqual(b.stateHash);
      expect([a.soloSteps, b.soloSteps]).toEqual([0, 0]);
      shared.push(a.stateHash.digest);
    }
    // A third peer alone in a swarm of its own reaches step 1 with other bits: another digest, and
    // it counts its steps taken with nobody else's samples.
    const lonely = new FakeSwarm(1, 16);
    const c = peer(lonely, 0);
    const events: CollaborativeOptimizerEvent[] = [];
    c.on((event) => events.push(event));
    for (let epoch = 0; epoch < 2; epoch++) {
      c.accumulate(dyadicGradient(10 + epoch), 16);
      expect(await c.maybeStep()).toBe(true);
    }
    expect(c.soloSteps).toBe(2);
    expect(lonely.reports.get(0)).toMatchObject({ soloSteps: 2, stateHash: c.stateHash });
    expect(events.map((event) => event.type === "step" && [event.soloSteps, event.stateDigest])).toEqual([
      [1, expect.stringMatching(STATE_DIGEST_PATTERN) as unknown],
      [2, c.stateHash.digest],
    ]);
    expect(c.stateHash.epoch).toBe(2);
    expect(c.stateHash.digest).not.toBe(shared[1]);
    // Loading the swarm's state ends the solo run and takes over its digest.
    c.importState(b.exportState());
    expect(c.soloSteps).toBe(0);
    expect(c.stateHash).toEqual(b.stateHash);
  });

  it("keeps the gradients when averaging fails, and the retry gives the same result", async () => {
    const run = async (failures: number) => {
      const swarm = new FakeSwarm(2, 32);
      swarm.failures = failures;
      const peers = [peer(swarm, 0), peer(swarm, 1)];
      const failed: CollaborativeOptimizerEvent[] = [];
      peers[0]?.on((event) => failed.push(event));
      peers[0]?.accumulate(dyadicGradient(1), 16);
      peers[1]?.accumulate(dyadicGradient(2), 16);
      const first = await Promise.all(peers.map((p) => p.maybeStep()));
      return { swarm, peers, first, failed };
    };
    const clean = await run(0);
    const { swarm, peers, first, failed } = await run(1);
    expect(first).toEqual([false, false]);
    expect(failed).toEqual([
      expect.objectContaining({
        type: "round-failed",
        epoch: 0,
        localSamples: 16,
        error: expect.any(SwarmError) as unknown,
      }),
    ]);
    for (const p of peers) {
      expect(p.epoch).toBe(0);
      expect(p.samplesAccumulated).toBe(16);
      expect(bits(p.parameters)).toEqual(bits(initialParameters()));
    }
    expect(swarm.reports.get(0)).toEqual({
      epoch: 0,
      samplesAccumulated: 16,
      samplesPerSecond: 0,
      generation: 0,
      stateHash: { epoch: 0, digest: stateDigest(initialParameters()) },
      soloSteps: 0,
    });
    expect(await Promise.all(peers.map((p) => p.maybeStep()))).toEqual([true, true]);
    for (const [i, p] of peers.entries())
      expect(bits(p.parameters)).toEqual(bits(clean.peers[i]?.parameters ?? new Float32Array()));
  });

  it("treats a malformed average as a failed round", async () => {
    const swarm = new FakeSwarm(1, 8);
    const p = new CollaborativeOptimizer({
      config: config(),
      layout,
      parameters: initialParameters(),
      progress: swarm.progress(0),
      averager: {
        average: (_e, v, w) =>
          Promise.resolve({ vector: v.map(() => Number.NaN), groupSize: 1, totalWeight: w }),
      },
      state: new FakeState(),
    });
    const events: CollaborativeOptimizerEvent[] = [];
    p.on((event) => events.push(event));
    p.accumulate(dyadicGradient(1), 8);
    expect(await p.maybeStep()).toBe(false);
    expect(p.samplesAccumulated).toBe(8);
    expect(events[0]).toMatchObject({
      type: "round-failed",
      error: { code: SwarmErrorCode.MALFORMED_MESSAGE },
    });
    expect(bits(p.parameters)).toEqual(bits(initialParameters()));
  });

  it("adopts a donor's state when it joins behind the swarm", async () => {
    const swarm = new FakeSwarm(2, 32);
    const state = new FakeState();
    const donor = { epoch: 5, parameters: dyadicGradient(7), optimizer: donorOptimizerState(5) };
    state.donor = donor;
    const p = peer(swarm, 0, config(), state);
    const events: CollaborativeOptimizerEvent[] = [];
    p.on((event) => events.push(event));
    p.accumulate(dyadicGradient(1), 16);
    expect(await p.maybeStep()).toBe(false);
    expect(state.calls).toEqual([0]);
    expect(p.epoch).toBe(5);
    expect(p.samplesAccumulated).toBe(0);
    expect(bits(p.parameters)).toEqual(bits(donor.parameters));
    expect(p.exportState()).toEqual({ ...donor, generation: 0, samples: 0 });
    expect(events).toEqual([{ type: "state-loaded", epoch: 5, previousEpoch: 0 }]);
    expect(swarm.reports.get(0)).toMatchObject({ epoch: 5, samplesAccumulated: 0 });
  });

  it("loads state when the swarm is more than one epoch ahead, not when it is one ahead", async () => {
    const swarm = new FakeSwarm(2, 32);
    const state = new FakeState();
    const p = peer(swarm, 0, config(), state);
    p.accumulate(dyadicGradient(1), 16);
    expect(await p.maybeStep()).toBe(false); // joins: no donor ahead, nothing to do
    expect(state.calls).toEqual([0]);

    swarm.reports.set(1, { epoch: 1, samplesAccumulated: 3, samplesPerSecond: 1 });
    const step = p.maybeStep(); // one ahead: this peer missed the round's start and tries to join it
    await until(() => swarm.rounds.get(0)?.length === 1);
    expect(state.calls).toEqual([0]);
    swarm.rounds.get(0)?.[0]?.reject(new SwarmError(SwarmErrorCode.NO_GROUP, "alone"));
    swarm.rounds.delete(0);
    expect(await step).toBe(false);
    // The round was over: it looked for a newer state at once (there was none yet) and kept its gradients.
    expect(state.calls).toEqual([0, 0]);
    expect(p.epoch).toBe(0);
    expect(p.samplesAccumulated).toBe(16);

    swarm.reports.set(1, { epoch: 2, samplesAccumulated: 3, samplesPerSecond: 1 });
    state.donor = { epoch: 2, parameters: dyadicGradient(8), optimizer: donorOptimizerState(2) };
    expect(await p.maybeStep()).toBe(false);
    expect(state.calls).toEqual([0, 0, 0]);
    expect(p.epoch).toBe(2);
    expect(p.samplesAccumulated).toBe(0);
    expect(bits(p.parameters)).toEqual(bits(state.donor.parameters));
  });

  it("catches up at once when its round fails after the swarm finished that epoch", async () => {
    // A late joiner whose freshly loaded state is already one step old: the others averaged epoch 3
    // without it. Its round for epoch 3 finds nobody, and it must not wait a retry delay to catch up.
    const swarm = new FakeSwarm(2, 32);
    const state = new FakeState();
    state.donor = { epoch: 3, parameters: dyadicGradient(7), optimizer: donorOptimizerState(3) };
    const p = peer(swarm, 0, config(), state);
    const events: CollaborativeOptimizerEvent[] = [];
    p.on((event) => events.push(event));
    expect(await p.maybeStep()).toBe(false);
    expect(p.epoch).toBe(3);

    swarm.reports.set(1, { epoch: 4, samplesAccumulated: 0, samplesPerSecond: 1 });
    const newer = { epoch: 4, parameters: dyadicGradient(9), optimizer: donorOptimizerState(4) };
    state.donor = newer;
    p.accumulate(dyadicGradient(1), 16);
    const step = p.maybeStep();
    await until(() => swarm.rounds.get(3)?.length === 1);
    swarm.rounds.get(3)?.[0]?.reject(new SwarmError(SwarmErrorCode.NO_GROUP, "the round is over"));
    swarm.rounds.delete(3);
    expect(await step).toBe(false);
    expect(p.epoch).toBe(4);
    expect(p.samplesAccumulated).toBe(0);
    expect(bits(p.parameters)).toEqual(bits(newer.parameters));
    expect(events.map((event) => event.type)).toEqual(["state-loaded", "round-failed", "state-loaded"]);
  });

  it("retries a failed round later, without loading state, while the swarm is still at its epoch", async () => {
    const swarm = new FakeSwarm(2, 32);
    const state = new FakeState();
    const p = peer(swarm, 0, config(), state);
    expect(await p.maybeStep()).toBe(false);
    swarm.reports.set(1, { epoch: 0, samplesAccumulated: 16, samplesPerSecond: 1 });
    p.accumulate(dyadicGradient(1), 16);
    const step = p.maybeStep();
    await until(() => swarm.rounds.get(0)?.length === 1);
    swarm.rounds.get(0)?.[0]?.reject(new SwarmError(SwarmErrorCode.NO_GROUP, "not yet"));
    swarm.rounds.delete(0);
    expect(await step).toBe(false);
    expect(state.calls).toEqual([0]);
    expect(p.samplesAccumulated).toBe(16);
  });

  it("keeps its state when the donor's state is malformed, and tries again after the delay", async () => {
    const swarm = new FakeSwarm(2, 32);
    const state = new FakeState();
    state.donor = { epoch: 3, parameters: new Float32Array(5), optimizer: donorOptimizerState(3) };
    let time = 0;
    const p = peer(swarm, 0, config(), state, () => time);
    const events: CollaborativeOptimizerEvent[] = [];
    p.on((event) => events.push(event));
    p.accumulate(dyadicGradient(1), 16);
    expect(await p.maybeStep()).toBe(false);
    expect(p.epoch).toBe(0);
    expect(p.samplesAccumulated).toBe(16);
    expect(events[0]).toMatchObject({
      type: "state-load-failed",
      error: { code: SwarmErrorCode.LENGTH_MISMATCH },
    });
    // A donor that keeps failing must not stall it: it trains on, and tries again after the delay.
    expect(await p.maybeStep()).toBe(false);
    expect(state.calls).toEqual([0]);
    time = 30_000;
    swarm.reports.set(1, { epoch: 3, samplesAccumulated: 0, samplesPerSecond: 1 });
    state.donor = null;
    expect(await p.maybeStep()).toBe(false); // no donor ahead now
    expect(state.calls).toEqual([0, 0]);
  });

  it("ignores a donor state that is not ahead of its own epoch", async () => {
    const swarm = new FakeSwarm(2, 32);
    const state = new FakeState();
    state.careless = true;
    state.donor = { epoch: 0, parameters: dyadicGradient(9), optimizer: donorOptimizerState(0) };
    const p = peer(swarm, 0, config(), state);
    p.accumulate(dyadicGradient(1), 16);
    expect(await p.maybeStep()).toBe(false);
    expect(state.calls).toEqual([0]);
    expect(p.samplesAccumulated).toBe(16);
    expect(bits(p.parameters)).toEqual(bits(initialParameters()));
  });

  it("puts a minibatch computed mostly after the swarm reached its target into the next step", async () => {
    const swarm = new FakeSwarm(2, 64);
    // The swarm's samples a moment ago, as the port's look back gives them (the fake has no clock).
    let before = 0;
    const lookingBack = (index: number) => {
      const port = swarm.progress(index);
      return { ...port, globalBefore: () => ({ ...port.global(), samplesAccumulated: before }) };
    };
    const [a, b] = [0, 1].map(
      (index) =>
        new CollaborativeOptimizer({
          config: config(),
          layout,
          parameters: initialParameters(),
          progress: lookingBack(index),
          averager: swarm.averager(index),
          state: new FakeState(),
        }),
    ) as [CollaborativeOptimizer, CollaborativeOptimizer];
    const steps: CollaborativeOptimizerEvent[] = [];
    b.on((event) => {
      if (event.type === "step") steps.push(event);
    });
    a.accumulate(dyadicGradient(1), 32);
    b.accumulate(dyadicGradient(2), 16);
    b.accumulate(dyadicGradient(3), 16); // the swarm has its 64
    // Half of the next minibatch was computed after the target was reached: it waits.
    before = 64 - 16 / 2;
    b.accumulate(dyadicGradient(4), 16);
    expect(b.samplesAccumulated).toBe(32);
    expect(swarm.reports.get(1)?.samplesAccumulated).toBe(32);
    await Promise.all([a.maybeStep(), b.maybeStep()]);
    expect(steps.at(-1)).toMatchObject({ totalWeight: 64, localSamples: 32 });
    // It opens the next step, reported at once.
    expect(b.samplesAccumulated).toBe(16);
    expect(swarm.reports.get(1)).toMatchObject({ epoch: 1, samplesAccumulated: 16 });
    a.accumulate(dyadicGradient(5), 48);
    await Promise.all([a.maybeStep(), b.maybeStep()]);
    expect(steps.at(-1)).toMatchObject({ epoch: 2, totalWeight: 64, localSamples: 16 });
    expect(bits(a.parameters)).toEqual(bits(b.parameters));

    // One mostly computed before the target joins the step that is forming.
    a.accumulate(dyadicGradient(6), 48);
    b.accumulate(dyadicGradient(7), 16);
    before = 64 - 16 / 2 - 1;
    b.accumulate(dyadicGradient(8), 16);
    expect(b.samplesAccumulated).toBe(32);
    await Promise.all([a.maybeStep(), b.maybeStep()]);
    expect(steps.at(-1)).toMatchObject({ epoch: 3, totalWeight: 80, localSamples: 32 });
    expect(b.samplesAccumulated).toBe(0);

    // Nothing waits while the swarm is short of its target now, whatever the look back says.
    before = 1_000;
    b.accumulate(dyadicGradient(9), 16);
    expect(b.samplesAccumulated).toBe(16);
  });

  it("takes in ahead only for dedloc: diloco's inner steps move its working parameters", () => {
    const swarm = new FakeSwarm(1, 16);
    const port = swarm.progress(0);
    const progress = { ...port, globalBefore: () => port.global() };
    const cfg = config({ averaging: { strategy: "diloco" } });
    const optimizer = new CollaborativeOptimizer({
      config: cfg,
      layout,
      parameters: initialParameters(),
      progress,
      averager: swarm.averager(0),
      state: new FakeState(),
    });
    optimizer.accumulate(dyadicGradient(1), 16);
    optimizer.accumulate(dyadicGradient(2), 16);
    expect(optimizer.samplesAccumulated).toBe(32);
  });

  it("estimates samples per second and reports progress", () => {
    const swarm = new FakeSwarm(2, 1000);
    let time = 0;
    const p = peer(swarm, 0, config(), new FakeState(), () => time);
    p.accumulate(dyadicGradient(1), 10);
    time = 100;
    p.accumulate(dyadicGradient(2), 10); // 10 samples in 0.1 s
    expect(p.samplesPerSecond).toBe(100);
    time = 300;
    p.accumulate(dyadicGradient(3), 10); // 50/s, smoothed
    expect(p.samplesPerSecond).toBeCloseTo(90, 9);
    expect(swarm.reports.get(0)).toEqual({
      epoch: 0,
      samplesAccumulated: 30,
      samplesPerSecond: p.samplesPerSecond,
      generation: 0,
      stateHash: { epoch: 0, digest: stateDigest(initialParameters()) },
      soloSteps: 0,
    });
  });

  it("throws ABORTED for a cancelled call and keeps the gradients", async () => {
    const swarm = new FakeSwarm(2, 16);
    swarm.manual = true;
    const p = peer(swarm, 0);
    p.accumulate(dyadicGradient(1), 16);
    await expect(p.maybeStep(AbortSignal.abort())).rejects.toMatchObject({ code: SwarmErrorCode.ABORTED });
    const controller = new AbortController();
    const step = p.maybeStep(controller.signal);
    await until(() => swarm.rounds.get(0)?.length === 1);
    controller.abort();
    swarm.failures = 1;
    swarm.release(0);
    await expect(step).rejects.toMatchObject({ code: SwarmErrorCode.ABORTED });
    expect(p.samplesAccumulated).toBe(16);
    expect(p.epoch).toBe(0);
  });
});

describe("CollaborativeOptimizer when nobody can give newer state", () => {
  it("steps alone at its own epoch, tries again after the delay, and at once when the swarm moves on", async () => {
    const swarm = new FakeSwarm(2, 32);
    const state = new FakeState();
    let time = 0;
    const cfg = config();
    const p = peer(swarm, 0, cfg, state, () => time);
    const events: CollaborativeOptimizerEvent[] = [];
    p.on((event) => events.push(event));
    // A record far ahead that nobody can serve state for (an aux's last epoch, a client trainer).
    swarm.reports.set(1, { epoch: 324, samplesAccumulated: 0, samplesPerSecond: 0 });
    const gradient = dyadicGradient(3);
    p.accumulate(gradient, 16);
    expect(await p.maybeStep()).toBe(false); // 16 of 32 samples at its own epoch
    expect(state.calls).toEqual([0]);
    expect(events).toEqual([{ type: "no-donor", epoch: 0, swarmEpoch: 324, retryInMs: 30_000 }]);
    p.accumulate(gradient, 16);
    expect(await p.maybeStep()).toBe(true);
    expect(state.calls).toEqual([0]); // no new attempt within the delay
    expect(p.epoch).toBe(1);
    expect(swarm.rounds.size).toBe(0); // nobody else at epoch 0: it did not ask for a group
    const reference = createFlatOptimizer(cfg.optimizer, layout);
    const expected = initialParameters();
    reference.step(expected, gradient, cfg.optimizer.learningRate);
    expect(bits(p.parameters)).toEqual(bits(expected));
    // Its samples trained a model of its own, not the swarm's: not a contribution.
    expect(events.at(-1)).toMatchObject({
      type: "step",
      epoch: 1,
      groupSize: 1,
      totalWeight: 32,
      shared: false,
    });
    expect(p.runSamples).toBe(32);

    time = 30_000; // the delay is over: it looks again, finds nothing, and goes on
    p.accumulate(gradient, 8);
    expect(await p.maybeStep()).toBe(false);
    expect(state.calls).toEqual([0, 1]);
    expect(events.filter((event) => event.type === "no-donor")).toHaveLength(2);

    // The swarm moves further ahead: a donor may be serving now, so it looks at once.
    swarm.reports.set(1, { epoch: 325, samplesAccumulated: 0, samplesPerSecond: 0 });
    state.donor = { epoch: 325, parameters: dyadicGradient(4), optimizer: donorOptimizerState(325) };
    expect(await p.maybeStep()).toBe(false);
    expect(state.calls).toEqual([0, 1, 1]);
    expect(p.epoch).toBe(325);
  });

  it("averages with whoever is at its own epoch", async () => {
    const swarm = new FakeSwarm(2, 32);
    const peers = [peer(swarm, 0), peer(swarm, 1)];
    swarm.reports.set(9, { epoch: 50, samplesAccumulated: 0, samplesPerSecond: 0 });
    peers.forEach((p, i) => {
      p.accumulate(dyadicGradient(10 + i), 16);
    });
    expect(await Promise.all(peers.map((p) => p.maybeStep()))).toEqual([true, true]);
    expect(peers.map((p) => p.epoch)).toEqual([1, 1]);
    expect(bits(at(peers, 0).parameters)).toEqual(bits(at(peers, 1).parameters));
    expect(peers.map((p) => p.runSamples)).toEqual([32, 32]);
  });

  it("trains on when a round fails one epoch behind the swarm and nobody has the newer state", async () => {
    const swarm = new FakeSwarm(2, 32);
    const state = new FakeState();
    const p = peer(swarm, 0, config(), state);
    const events: CollaborativeOptimizerEvent[] = [];
    p.on((event) => events.push(event));
    expect(await p.maybeStep()).toBe(false);
    swarm.reports.set(1, { epoch: 1, samplesAccumulated: 0, samplesPerSecond: 0 });
    p.accumulate(dyadicGradient(1), 32);
    const step = p.maybeStep();
    await until(() => swarm.rounds.get(0)?.length === 1);
    swarm.rounds.get(0)?.[0]?.reject(new SwarmError(SwarmErrorCode.NO_GROUP, "the round is over"));
    swarm.rounds.delete(0);
    expect(await step).toBe(false);
    expect(events.map((event) => event.type)).toEqual(["round-failed", "no-donor"]);
    expect(await p.maybeStep()).toBe(true); // alone at epoch 0, with its 32 samples
    expect(p.epoch).toBe(1);
    expect(state.calls).toEqual([0, 0]);
  });
});

describe("CollaborativeOptimizer's run lineage", () => {
  it("counts the samples of every step, and exports and imports generation, samples and config version", async () => {
    const swarm = new FakeSwarm(2, 32);
    const state = new FakeState();
    const cfg = config();
    const peers = [
      new CollaborativeOptimizer({
        config: cfg,
        layout,
        parameters: initialParameters(),
        progress: swarm.progress(0),
        averager: swarm.averager(0),
        state,
        configVersion: 4,
      }),
      peer(swarm, 1),
    ];
    for (let epoch = 0; epoch < 2; epoch++) {
      peers.forEach((p, i) => {
        p.accumulate(dyadicGradient(epoch * 10 + i), 8 * (i + 1));
      });
      peers.forEach((p) => {
        p.accumulate(dyadicGradient(99), 8);
      });
      expect(await Promise.all(peers.map((p) => p.maybeStep()))).toEqual([true, true]);
    }
    const first = at(peers, 0);
    expect(first.runSamples).toBe(2 * (8 + 16 + 16));
    expect(first.generation).toBe(0);
    expect(first.exportState()).toMatchObject({ epoch: 2, generation: 0, samples: 80, configVersion: 4 });
    expect(at(peers, 1).exportState()).not.toHaveProperty("configVersion");
    expect(state.generations).toEqual([0]);

    // A rollback: back to an older epoch, in a new generation.
    const checkpoint = {
      epoch: 1,
      parameters: dyadicGradient(5),
      optimizer: donorOptimizerState(1),
      generation: 1,
      samples: 40,
    };
    first.importState(checkpoint);
    expect(first.epoch).toBe(1);
    expect(first.generation).toBe(1);
    expect(first.runSamples).toBe(40);
    expect(first.exportState()).toEqual({ ...checkpoint, configVersion: 4 });
    expect(swarm.reports.get(0)).toMatchObject({ epoch: 1, generation: 1 });
    expect(() => {
      first.importState({ ...checkpoint, generation: -1 });
    }).toThrow(expect.objectContaining({ code: SwarmErrorCode.MALFORMED_MESSAGE }));
    expect(() => {
      first.importState({ ...checkpoint, samples: Number.NaN });
    }).toThrow(expect.objectContaining({ code: SwarmErrorCode.MALFORMED_MESSAGE }));
    expect(first.exportState()).toEqual({ ...checkpoint, configVersion: 4 });
  });

  it("asks for state of its own generation and ignores a state of another one", async () => {
    const swarm = new FakeSwarm(2, 32);
    const state = new FakeState();
    const p = peer(swarm, 0, config(), state);
    p.importState({
      epoch: 2,
      parameters: dyadicGradient(5),
      optimizer: donorOptimizerState(2),
      generation: 3,
    });
    state.donor = {
      epoch: 9,
      parameters: dyadicGradient(6),
      optimizer: donorOptimizerState(9),
      generation: 2,
    };
    swarm.reports.set(1, { epoch: 9, samplesAccumulated: 0, samplesPerSecond: 0, generation: 3 });
    expect(await p.maybeStep()).toBe(false);
    expect(state.generations).toEqual([3]);
    expect(p.epoch).toBe(2);
    expect(p.generation).toBe(3);
  });
});

describe("CollaborativeOptimizer with delayed parameter updates", () => {
  const dpu = config({ averaging: { delayedParameterUpdates: true } });
  /** The gradient of ½‖θ − target‖²: it depends on the parameters, so staleness shows. */
  const target = dyadicGradient(42);
  const gradientAt = (parameters: Float32Array) => parameters.map((value, i) => value - (target[i] ?? 0));

  it("applies each update one step late, and the result is the stale-gradient trajectory", async () => {
    const swarm = new FakeSwarm(2, 32);
    swarm.manual = true;
    const peers = [peer(swarm, 0, dpu), peer(swarm, 1, dpu)];
    const theta0 = initialParameters();

    for (const p of peers) p.accumulate(gradientAt(p.parameters), 16); // g(θ0)
    expect(await Promise.all(peers.map((p) => p.maybeStep()))).toEqual([true, true]);
    for (const p of peers) {
      expect(p.epoch).toBe(1); // already accumulating for the next epoch
      expect(bits(p.parameters)).toEqual(bits(theta0)); // the update has not landed
      expect(p.pendingStep()).not.toBeNull();
      expect(p.exportState().epoch).toBe(0); // donors serve consistent state
      expect(await p.maybeStep()).toBe(false); // one round at a time
    }
    for (const p of peers) p.accumulate(gradientAt(p.parameters), 16); // g(θ0) again: one step stale
    // The round for epoch 0 is reported as in flight, so its leader still waits for this peer.
    expect(swarm.reports.get(0)).toMatchObject({ epoch: 1, samplesAccumulated: 16, averagingEpoch: 0 });
    swarm.release(0);
    await Promise.all(peers.map((p) => p.pendingStep() ?? Promise.resolve()));
    expect(peers.map((p) => p.pendingStep())).toEqual([null, null]);
    expect(swarm.reports.get(0)).not.toHaveProperty("averagingEpoch");

    const reference = createFlatOptimizer(dpu.optimizer, layout);
    const theta = theta0.slice();
    const g0 = gradientAt(theta0);
    reference.step(theta, g0, 1e-3);
    expect(bits(peers[0]?.parameters ?? new Float32Array())).toEqual(bits(theta));

    expect(await Promise.all(peers.map((p) => p.maybeStep()))).toEqual([true, true]);
    swarm.release(1);
    await Promise.all(peers.map((p) => p.pendingStep() ?? Promise.resolve()));
    reference.step(theta, g0, 1e-3); // the second update used g(θ0), not g(θ1)
    for (const p of peers) {
      expect(p.epoch).toBe(2);
      expect(bits(p.parameters)).toEqual(bits(theta));
      expect(p.exportState().epoch).toBe(2);
    }
  });

  it("discards a background round's result when state was imported meanwhile", async () => {
    const swarm = new FakeSwarm(1, 16);
    swarm.manual = true;
    const p = peer(swarm, 0, dpu);
    p.accumulate(dyadicGradient(1), 16);
    expect(await p.maybeStep()).toBe(true);
    const donor = { epoch: 7, parameters: dyadicGradient(5), optimizer: donorOptimizerState(7) };
    p.importState(donor);
    swarm.release(0);
    await p.pendingStep();
    expect(p.epoch).toBe(7);
    expect(p.exportState()).toEqual({ ...donor, generation: 0, samples: 0 });
  });

  it("undoes a failed background round: back to the epoch, with all its gradients", async () => {
    const swarm = new FakeSwarm(2, 32);
    swarm.manual = true;
    swarm.failures = 1;
    const p = peer(swarm, 0, dpu);
    const events: CollaborativeOptimizerEvent[] = [];
    p.on((event) => events.push(event));
    swarm.reports.set(1, { epoch: 0, samplesAccumulated: 16, samplesPerSecond: 1 });
    p.accumulate(dyadicGradient(1), 16);
    expect(await p.maybeStep()).toBe(true);
    p.accumulate(dyadicGradient(2), 8); // computed during the round, with the same parameters
    swarm.release(0);
    await p.pendingStep();
    expect(p.epoch).toBe(0);
    expect(p.samplesAccumulated).toBe(24);
    expect(swarm.reports.get(0)).toMatchObject({ epoch: 0, samplesAccumulated: 24 });
    expect(events).toEqual([expect.objectContaining({ type: "round-failed", epoch: 0, localSamples: 16 })]);
    expect(bits(p.parameters)).toEqual(bits(initialParameters()));
  });
});

function donorOptimizerState(step: number) {
  const optimizer = createFlatOptimizer(config().optimizer, layout);
  const state = optimizer.exportState();
  return { ...state, step, slots: { m: dyadicGradient(step), v: dyadicGradient(step + 1).map(Math.abs) } };
}
