import { afterEach, describe, expect, it } from "vitest";
import { CollaborativeOptimizer } from "../src/optim/collaborative-optimizer.ts";
import { ParameterLayout } from "../src/optim/parameter-layout.ts";
import type { Swarm } from "../src/swarm.ts";
import { at } from "./support/at.ts";
import { eventually, TestAuthority } from "./support/swarm-fixtures.ts";
import { seededRandom, startSwarm, type TestSwarmOptions } from "./support/swarm-harness.ts";

/** A linear regression y = w·x + noise that every peer samples from its own seeded stream. */
const DIMENSION = 16;
const TRUE_WEIGHTS = Float32Array.from({ length: DIMENSION }, (_, i) => Math.sin(i + 1));

function batchGradient(
  weights: Float32Array,
  random: () => number,
  size: number,
): { gradient: Float32Array; loss: number } {
  const gradient = new Float32Array(DIMENSION);
  let loss = 0;
  for (let n = 0; n < size; n += 1) {
    const x = Float32Array.from({ length: DIMENSION }, () => random() * 2 - 1);
    let error = (random() - 0.5) * 0.01;
    for (let i = 0; i < DIMENSION; i += 1) error += (at(weights, i) - at(TRUE_WEIGHTS, i)) * at(x, i);
    loss += error * error;
    for (let i = 0; i < DIMENSION; i += 1) gradient[i] = at(gradient, i) + (2 * error * at(x, i)) / size;
  }
  return { gradient, loss: loss / size };
}

const LAYOUT = ParameterLayout.fromShapes([{ name: "w", shape: [DIMENSION] }]);

/** An optimizer for `swarm`'s peer, starting from zero weights. */
function optimizerOn(swarm: Swarm): CollaborativeOptimizer {
  return new CollaborativeOptimizer({
    config: swarm.config,
    layout: LAYOUT,
    parameters: new Float32Array(DIMENSION),
    progress: swarm.progressPort(),
    averager: swarm.averagerPort(),
    state: swarm.statePort(),
  });
}

/** Euclidean distance from `weights` to the true ones. */
function distanceToTruth(weights: Float32Array): number {
  return Math.hypot(...weights.map((value, i) => value - at(TRUE_WEIGHTS, i)));
}

const swarms: Swarm[] = [];

/**
 * A peer that joins the first three swarms (at `epochs`) once they pushed their progress, and what
 * it downloads from them.
 */
async function lateJoinerDownload(
  authority: TestAuthority,
  config: TestSwarmOptions["config"],
  bootstrap: TestSwarmOptions["bootstrap"],
  epochs: number,
) {
  const late = await startSwarm(authority, { config, bootstrap });
  swarms.push(late);
  await Promise.all(swarms.slice(0, 3).map((swarm) => swarm.progress.pushNow()));
  await eventually(
    () => late.progress.records().filter((entry) => entry.record.epoch === epochs).length === 3,
    "the late peer sees the others",
  );
  return late.statePort().loadNewer(0, 0);
}

afterEach(async () => {
  await Promise.all(swarms.splice(0).map((swarm) => swarm.stop().catch(() => undefined)));
});

describe("collaborative training over a real swarm", () => {
  it("keeps every peer's parameters bit-identical step after step, and a late joiner downloads them", async () => {
    const authority = new TestAuthority();
    const config = {
      training: { targetBatchSize: 96 },
      optimizer: { name: "adam" as const, learningRate: 0.05 },
      averaging: { matchmakingTimeoutMs: 5_000, allreduceTimeoutMs: 10_000, chunkSizeBytes: 4096 },
      compression: { method: "none" as const },
    };
    const optimizers: CollaborativeOptimizer[] = [];
    const stateOf = (k: number) => () => {
      const optimizer = optimizers[k];
      if (optimizer === undefined) return null;
      const state = optimizer.exportState();
      return { epoch: state.epoch, parameters: state.parameters, optimizer: state.optimizer };
    };
    const first = await startSwarm(authority, { config, getState: stateOf(0) });
    swarms.push(first);
    const bootstrap = first.node.multiaddrs();
    for (let k = 1; k < 3; k += 1)
      swarms.push(await startSwarm(authority, { config, bootstrap, getState: stateOf(k) }));
    await eventually(() => swarms.every((swarm) => swarm.node.members().length === 2), "meshed");
    for (const swarm of swarms) optimizers.push(optimizerOn(swarm));
    const epochs = 4;
    const losses: number[][] = optimizers.map(() => []);
    await Promise.all(
      optimizers.map(async (optimizer, k) => {
        const random = seededRandom(100 + k);
        while (optimizer.epoch < epochs) {
          const { gradient, loss } = batchGradient(optimizer.parameters, random, 8);
          at(losses, k).push(loss);
          optimizer.accumulate(gradient, 8);
          await optimizer.maybeStep();
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
      }),
    );
    for (const optimizer of optimizers) {
      expect(optimizer.epoch).toBe(epochs);
      expect(optimizer.parameters).toEqual(at(optimizers, 0).parameters);
    }
    // Training moved the shared weights toward the true ones.
    expect(distanceToTruth(at(optimizers, 0).parameters)).toBeLessThan(
      0.9 * distanceToTruth(new Float32Array(DIMENSION)),
    );

    // A peer joining now catches up from its peers before it contributes.
    for (const swarm of swarms.slice(0, 3))
      swarm.progress.report({ epoch: epochs, samplesAccumulated: 0, samplesPerSecond: 1 });
    const downloaded = await lateJoinerDownload(authority, config, bootstrap, epochs);
    expect(downloaded?.epoch).toBe(epochs);
    expect(downloaded?.parameters).toEqual(at(optimizers, 0).parameters);
    expect(downloaded?.optimizer).toEqual(at(optimizers, 0).exportState().optimizer);
  }, 90_000);

  it("a peer that holds another state at the same step takes the swarm's over: one model again", async () => {
    const authority = new TestAuthority();
    const config = {
      training: { targetBatchSize: 96 },
      optimizer: { name: "adam" as const, learningRate: 0.05 },
      averaging: { matchmakingTimeoutMs: 5_000, allreduceTimeoutMs: 10_000, chunkSizeBytes: 4096 },
      compression: { method: "none" as const },
    };
    const optimizers: CollaborativeOptimizer[] = [];
    const stateOf = (k: number) => () => {
      const optimizer = optimizers[k];
      if (optimizer === undefined) return null;
      const state = optimizer.exportState();
      return { epoch: state.epoch, parameters: state.parameters, optimizer: state.optimizer };
    };
    const first = await startSwarm(authority, { config, getState: stateOf(0) });
    swarms.push(first);
    const bootstrap = first.node.multiaddrs();
    for (let k = 1; k < 3; k += 1)
      swarms.push(await startSwarm(authority, { config, bootstrap, getState: stateOf(k) }));
    await eventually(() => swarms.every((swarm) => swarm.node.members().length === 2), "meshed");
    for (const swarm of swarms) optimizers.push(optimizerOn(swarm));
    // The third peer holds other bits at step 0 (it stepped alone once, say, and came back).
    const apart = at(optimizers, 2);
    apart.importState({ ...apart.exportState(), parameters: new Float32Array(DIMENSION).fill(0.5) });
    const loaded: string[] = [];
    apart.on((event) => {
      if (event.type === "state-loaded" && event.reason === "swarm-state") loaded.push(`at ${event.epoch}`);
    });
    const epochs = 5;
    await Promise.all(
      optimizers.map(async (optimizer, k) => {
        const random = seededRandom(300 + k);
        while (optimizer.epoch < epochs) {
          const { gradient } = batchGradient(optimizer.parameters, random, 8);
          optimizer.accumulate(gradient, 8);
          await optimizer.maybeStep();
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
      }),
    );
    expect(loaded.length).toBeGreaterThan(0);
    // The same step holds the same bits everywhere: what the peers publish agrees.
    await eventually(
      () => new Set(optimizers.map((optimizer) => JSON.stringify(optimizer.stateHash))).size === 1,
      "one model",
      10_000,
    );
    for (const optimizer of optimizers) expect(optimizer.parameters).toEqual(at(optimizers, 0).parameters);
  }, 90_000);

  it("with delayed parameter updates, every round averages the whole swarm while the next epoch trains", async () => {
    const authority = new TestAuthority();
    const config = {
      training: { targetBatchSize: 96 },
      optimizer: { name: "adam" as const, learningRate: 0.05 },
      averaging: {
        matchmakingTimeoutMs: 5_000,
        allreduceTimeoutMs: 10_000,
        chunkSizeBytes: 4096,
        delayedParameterUpdates: true,
      },
      compression: { method: "none" as const },
    };
    const first = await startSwarm(authority, { config });
    swarms.push(first);
    const bootstrap = first.node.multiaddrs();
    for (let k = 1; k < 3; k += 1) swarms.push(await startSwarm(authority, { config, bootstrap }));
    await eventually(() => swarms.every((swarm) => swarm.node.members().length === 2), "meshed");
    const events: string[][] = swarms.map(() => []);
    const optimizers = swarms.map((swarm, k) => {
      const optimizer = optimizerOn(swarm);
      optimizer.on((event) => {
        at(events, k).push(
          event.type === "step"
            ? `step ${event.epoch} of ${event.groupSize}`
            : `${event.type} ${event.epoch}`,
        );
      });
      return optimizer;
    });
    const epochs = 4;
    await Promise.all(
      optimizers.map(async (optimizer, k) => {
        const random = seededRandom(200 + k);
        while (optimizer.exportState().epoch < epochs) {
          const { gradient } = batchGradient(optimizer.parameters, random, 8);
          optimizer.accumulate(gradient, 8);
          await optimizer.maybeStep();
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
        await optimizer.pendingStep();
      }),
    );
    const steps = Array.from({ length: epochs }, (_, e) => `step ${e + 1} of 3`);
    for (const [k, optimizer] of optimizers.entries()) {
      // Every round was the whole swarm's, none failed or fell back to a download.
      expect(at(events, k).slice(0, epochs)).toEqual(steps);
      expect(optimizer.parameters).toEqual(at(optimizers, 0).parameters);
    }
  }, 90_000);

  it("with diloco and top-k error feedback, peers take local steps and agree bit for bit after every outer step", async () => {
    const authority = new TestAuthority();
    const config = {
      training: { targetBatchSize: 96 },
      // Adam's steps are about lr whatever the gradient, and the outer momentum multiplies them:
      // a smaller inner rate than the tests above keeps four outer steps from overshooting.
      optimizer: { name: "adam" as const, learningRate: 0.02 },
      averaging: {
        strategy: "diloco" as const,
        matchmakingTimeoutMs: 5_000,
        allreduceTimeoutMs: 10_000,
        chunkSizeBytes: 4096,
      },
      compression: { method: "topk" as const, topkDensity: 0.25 },
    };
    const optimizers: CollaborativeOptimizer[] = [];
    const stateOf = (k: number) => () => optimizers[k]?.exportState() ?? null;
    const first = await startSwarm(authority, { config, getState: stateOf(0) });
    swarms.push(first);
    const bootstrap = first.node.multiaddrs();
    for (let k = 1; k < 3; k += 1)
      swarms.push(await startSwarm(authority, { config, bootstrap, getState: stateOf(k) }));
    await eventually(() => swarms.every((swarm) => swarm.node.members().length === 2), "meshed");
    for (const swarm of swarms) optimizers.push(optimizerOn(swarm));
    const sent: number[] = [];
    const thetas = new Map<number, Float32Array[]>();
    for (const [k, optimizer] of optimizers.entries()) {
      optimizer.on((event) => {
        if (event.type !== "step") return;
        expect(event.groupSize).toBe(3);
        sent.push(event.bytesSent ?? -1);
        const list = thetas.get(event.epoch) ?? [];
        list[k] = optimizer.parameters.slice();
        thetas.set(event.epoch, list);
      });
    }
    const epochs = 4;
    await Promise.all(
      optimizers.map(async (optimizer, k) => {
        const random = seededRandom(300 + k);
        while (optimizer.epoch < epochs) {
          // Each minibatch is an inner step: the gradient is taken at this peer's own weights.
          const { gradient } = batchGradient(optimizer.workingParameters, random, 8);
          optimizer.accumulate(gradient, 8);
          await optimizer.maybeStep();
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
      }),
    );
    for (let epoch = 1; epoch <= epochs; epoch++) {
      const list = thetas.get(epoch) ?? [];
      expect(list).toHaveLength(3);
      for (const theta of list) expect(theta).toEqual(list[0]);
    }
    // Every step says what this peer wrote on the wire for it.
    expect(sent).toHaveLength(3 * epochs);
    expect(sent.every((bytes) => bytes > 0)).toBe(true);
    expect(distanceToTruth(at(optimizers, 0).parameters)).toBeLessThan(
      0.9 * distanceToTruth(new Float32Array(DIMENSION)),
    );

    // A late joiner downloads θ and the outer optimizer's state.
    const downloaded = await lateJoinerDownload(authority, config, bootstrap, epochs);
    expect(downloaded?.epoch).toBe(epochs);
    expect(downloaded?.parameters).toEqual(at(optimizers, 0).parameters);
    expect(downloaded?.optimizer).toEqual(at(optimizers, 0).exportState().optimizer);
    expect(downloaded?.optimizer.name).toBe("sgd");
  }, 90_000);
});
