import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseExperimentConfig, type DatasetManifest, type ExperimentConfig } from "@barnraise/protocol";
import {
  CollaborativeOptimizer,
  type AveragedVector,
  type GlobalProgress,
  type LocalProgress,
  type Swarm,
} from "@barnraise/swarm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TestAuthority, eventually } from "../../swarm/test/support/swarm-fixtures.ts";
import { startSwarm } from "../../swarm/test/support/swarm-harness.ts";
import { datasetsDir, prepareDatasets } from "../../../apps/web/src/server/datasets/prepare-datasets.ts";
import { LocalObjectStore } from "../../../apps/web/src/server/storage/local-object-store.ts";
import {
  type Batch,
  createBatchStream,
  createModel,
  type GradientResult,
  selectNodeBackend,
  type TrainableModel,
} from "@barnraise/models/node";
import { LossReportingProgress, type ProgressSink } from "../src/training/loss-reporting-progress.ts";
import { Trainer } from "../src/training/trainer.ts";
import { DirectoryDatasetSource } from "../../models/test/support/directory-dataset-source.ts";
import { modelKindOf } from "@barnraise/models";

/**
 * DeDLOC I.6: a collaborative run and a single-process run with the same global batch size follow
 * the same stepwise loss curve. Three peers on a real swarm (libp2p on loopback) each read their
 * own shuffle of MNIST and accumulate toward a shared 512-sample batch; one process accumulates
 * the same 512 samples alone. Both start from the same parameters with the same Adam settings, so
 * the curves may differ only by sampling noise, which the test estimates from the curves.
 */

const STEPS = 24;
const SEED = 1234;
const configInput = {
  model: { kind: "mnist-mlp" as const, hiddenUnits: [32] },
  training: { targetBatchSize: 512, localBatchSize: 32, maxSteps: STEPS },
  optimizer: { name: "adam" as const, learningRate: 0.003 },
  averaging: { matchmakingTimeoutMs: 4_000, allreduceTimeoutMs: 8_000 },
  compression: { method: "none" as const },
};

let root = "";
let source: DirectoryDatasetSource;
let manifest: DatasetManifest;
const swarms: Swarm[] = [];

beforeAll(async () => {
  await selectNodeBackend("wasm");
  root = await mkdtemp(join(tmpdir(), "loss-curves-"));
  await prepareDatasets({
    storage: new LocalObjectStore(root),
    datasets: ["mnist"],
    limit: 8_000,
    recordsPerShard: 1_000,
  });
  source = new DirectoryDatasetSource({ dir: join(datasetsDir(root), "mnist"), dataset: "mnist" });
  manifest = await source.manifest();
}, 120_000);

afterAll(async () => {
  await Promise.all(swarms.splice(0).map((swarm) => swarm.stop()));
  await rm(root, { recursive: true, force: true });
});

/** Loss sums and sample counts per step, filled by every peer of a run. */
class StepLosses {
  readonly #sums = new Map<number, { loss: number; samples: number }>();

  add(step: number, loss: number, samples: number): void {
    const entry = this.#sums.get(step) ?? { loss: 0, samples: 0 };
    entry.loss += loss * samples;
    entry.samples += samples;
    this.#sums.set(step, entry);
  }

  /** The sample-weighted mean loss of each step 0 … count−1. */
  curve(count: number): number[] {
    return Array.from({ length: count }, (_, step) => {
      const entry = this.#sums.get(step);
      if (entry === undefined) throw new Error(`no loss recorded for step ${step}`);
      return entry.loss / entry.samples;
    });
  }
}

/** The model, with each minibatch's loss recorded under the step it was computed for. */
function recording(model: TrainableModel, losses: StepLosses, step: () => number): TrainableModel {
  return {
    config: model.config,
    kind: model.kind,
    layout: model.layout,
    initialParameters: (seed) => model.initialParameters(seed),
    setParameters: (parameters) => {
      model.setParameters(parameters);
    },
    computeGradients: async (batch: Batch, seed: number): Promise<GradientResult> => {
      const at = step();
      const result = await model.computeGradients(batch, seed);
      losses.add(at, result.loss, result.samples);
      return result;
    },
    evaluate: (batch) => model.evaluate(batch),
    dispose: () => {
      model.dispose();
    },
  };
}

function trainer(
  config: ExperimentConfig,
  model: TrainableModel,
  optimizer: CollaborativeOptimizer,
  progress: LossReportingProgress,
  peerSeed: number,
  swarm: { global(): GlobalProgress; peersOnline(): number },
): Trainer {
  return new Trainer({
    model,
    optimizer,
    progress,
    batches: createBatchStream({
      source,
      split: "train",
      batchSize: 32,
      seed: peerSeed,
      config,
      kind: modelKindOf(config.model),
      manifest,
    }),
    swarm,
    seed: peerSeed,
    maxSteps: STEPS,
  });
}

async function collaborativeRun(config: ExperimentConfig, peers: number): Promise<number[]> {
  const authority = new TestAuthority();
  const losses = new StepLosses();
  const optimizers: CollaborativeOptimizer[] = [];
  const started: Swarm[] = [];
  for (let k = 0; k < peers; k++) {
    const bootstrap = started[0]?.node.multiaddrs() ?? [];
    const swarm = await startSwarm(authority, {
      config: configInput,
      bootstrap,
      getState: () => optimizers[k]?.exportState() ?? null,
    });
    started.push(swarm);
    swarms.push(swarm);
  }
  await eventually(() => started.every((swarm) => swarm.node.members().length === peers - 1), "meshed");
  const trainers = started.map((swarm, k) => {
    const base = createModel(config.model);
    const progress = new LossReportingProgress(swarm.progress);
    const optimizer = new CollaborativeOptimizer({
      config,
      layout: base.layout,
      parameters: base.initialParameters(SEED),
      progress,
      averager: swarm.averagerPort(),
      state: swarm.statePort(),
    });
    optimizers.push(optimizer);
    const model = recording(base, losses, () => optimizer.epoch);
    const view = { global: () => swarm.progress.global(), peersOnline: () => peers };
    return { model, run: trainer(config, model, optimizer, progress, 100 + k, view) };
  });
  const results = await Promise.all(trainers.map(({ run }) => run.run()));
  for (const { model } of trainers) model.dispose();
  for (const result of results) expect(result).toMatchObject({ reason: "max-steps", step: STEPS });
  return losses.curve(STEPS);
}

/** One process accumulating the whole global batch: its own progress is the swarm's. */
async function singleRun(config: ExperimentConfig): Promise<number[]> {
  const losses = new StepLosses();
  const base = createModel(config.model);
  let last: LocalProgress = { epoch: 0, samplesAccumulated: 0, samplesPerSecond: 0 };
  const alone: ProgressSink = {
    report: (progress) => {
      last = progress;
    },
    global: () => ({
      epoch: last.epoch,
      samplesAccumulated: last.samplesAccumulated,
      targetBatchSize: config.training.targetBatchSize,
      etaSeconds: 0,
    }),
    at: (epoch) => ({
      epoch,
      samplesAccumulated: last.epoch === epoch ? last.samplesAccumulated : 0,
      targetBatchSize: config.training.targetBatchSize,
      etaSeconds: 0,
      peersAtEpoch: 1,
    }),
  };
  const progress = new LossReportingProgress(alone);
  const optimizer = new CollaborativeOptimizer({
    config,
    layout: base.layout,
    parameters: base.initialParameters(SEED),
    progress,
    averager: {
      average: (_epoch, vector, weight): Promise<AveragedVector> =>
        Promise.resolve({ vector: vector.slice(), groupSize: 1, totalWeight: weight, soleTrainer: true }),
    },
    state: { loadNewer: () => Promise.resolve(null) },
  });
  const model = recording(base, losses, () => optimizer.epoch);
  const result = await trainer(config, model, optimizer, progress, 7, {
    global: () => alone.global(),
    peersOnline: () => 1,
  }).run();
  model.dispose();
  expect(result).toMatchObject({ reason: "max-steps", step: STEPS });
  return losses.curve(STEPS);
}

/** Standard deviation of a curve's step-to-step noise: residuals from the mean of its neighbours. */
function stepNoise(curve: readonly number[]): number {
  const residuals: number[] = [];
  for (let t = 1; t + 1 < curve.length; t++) {
    residuals.push((curve[t] ?? 0) - ((curve[t - 1] ?? 0) + (curve[t + 1] ?? 0)) / 2);
  }
  const mean = residuals.reduce((sum, r) => sum + r, 0) / residuals.length;
  const variance = residuals.reduce((sum, r) => sum + (r - mean) ** 2, 0) / (residuals.length - 1);
  // r = x_t − (x_{t−1} + x_{t+1})/2 has variance 1.5σ² for independent noise σ.
  return Math.sqrt(variance / 1.5);
}

describe("collaborative and single-process training", () => {
  it("follow the same stepwise loss curve with the same global batch (DeDLOC I.6)", async () => {
    const config = parseExperimentConfig(configInput);
    const collaborative = await collaborativeRun(config, 3);
    const single = await singleRun(config);

    // Both learn: the loss falls to well under half of where it started.
    for (const curve of [collaborative, single]) {
      expect(curve.at(-1)).toBeLessThan(0.5 * (curve[0] ?? 0));
    }
    // Step 0 is computed at the same initial parameters: only sampling differs.
    const noise = Math.max(stepNoise(collaborative), stepNoise(single), 0.01);
    // In windows of 4 steps, the mean difference stays within 4 standard errors of the noise.
    const window = 4;
    for (let start = 0; start < STEPS; start += window) {
      let difference = 0;
      for (let t = start; t < start + window; t++) difference += (collaborative[t] ?? 0) - (single[t] ?? 0);
      const bound = 4 * noise * Math.sqrt(2 / window);
      expect(Math.abs(difference / window), `steps ${start}…${start + window - 1}`).toBeLessThan(bound);
    }
  }, 180_000);
});
