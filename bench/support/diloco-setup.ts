/**
 * What the DiLoCo benchmarks (bench/diloco-quality.ts, bench/diloco-utilization.ts) share: the
 * models they train, the experiment config of each averaging variant, the prepared datasets, and a
 * model wrapper that times `computeGradients`.
 */
import { readFileSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import {
  builtInModelDataset,
  type DatasetManifest,
  type ExperimentConfigInput,
  type BuiltInModelConfig,
} from "@barnraise/protocol";
import { DirectoryDatasetSource } from "../../packages/models/test/support/directory-dataset-source.ts";
import type { Batch, TrainableModel } from "@barnraise/models";
import { datasetsDir, prepareDatasets } from "../../apps/web/src/server/datasets/prepare-datasets.ts";
import { LocalObjectStore } from "../../apps/web/src/server/storage/local-object-store.ts";

/** Where the benches keep prepared shards between runs (prepared once, then found up to date). */
export const DEFAULT_DATA_DIR = join(tmpdir(), "barnraise-bench-data");

/** A preset the benches train; an uploaded model needs a platform to download it from, so none is benched. */
export type BenchPreset = BuiltInModelConfig["kind"];

/** The models the benches train, by preset name, with their bench defaults. */
export interface BenchModel {
  /** The `model` of the experiment config. */
  readonly model: ExperimentConfigInput["model"] & { kind: BenchPreset };
  /** DeDLOC's target batch (the swarm's samples per collaborative step). */
  readonly targetBatchSize: number;
  readonly localBatchSize: number;
  /** DiLoCo's round target is H × the DeDLOC target. */
  readonly h: number;
  /** Samples every variant trains. */
  readonly samples: number;
}

export const BENCH_MODELS: Readonly<Record<BenchPreset, BenchModel>> = {
  // The preset as it ships: 784 → 128 → 64 → 10, 109,386 parameters. H = 25 (SparseLoCo reports
  // 15 to 250) so that 32 rounds fit in about 23 passes over MNIST's 9,003 training digits.
  "mnist-mlp": {
    model: { kind: "mnist-mlp" },
    targetBatchSize: 256,
    localBatchSize: 32,
    h: 25,
    samples: 32 * 25 * 256,
  },
  // A small ALBERT (146,976 parameters, most of them the 4,096 × 32 embedding) so that a CPU with
  // the wasm backend trains it at a few hundred samples a second; H is 16, not 100, so that a run of
  // minutes holds 32 DiLoCo rounds.
  "albert-mlm": {
    model: {
      kind: "albert-mlm",
      embeddingSize: 32,
      hiddenSize: 32,
      numLayers: 2,
      numHeads: 2,
      intermediateSize: 64,
      maxSequenceLength: 32,
    },
    targetBatchSize: 64,
    localBatchSize: 16,
    h: 16,
    samples: 32 * 16 * 64,
  },
};

export function isBenchModel(name: string): name is BenchPreset {
  return Object.hasOwn(BENCH_MODELS, name);
}

/** The averaging variants the benches compare. */
export const VARIANTS = ["dedloc", "diloco-fp32", "diloco-int8", "diloco-topk"] as const;
export type VariantName = (typeof VARIANTS)[number];

export interface VariantOptions {
  readonly bench: BenchModel;
  readonly h: number;
  /** The inner (DiLoCo) or only (DeDLOC) optimizer's Adam learning rate. */
  readonly learningRate: number;
  /** Default: DiLoCo's Nesterov SGD (0.7, 0.9), or with top-k SparseLoCo's SGD (1, no momentum), as the form suggests. */
  readonly outerLearningRate?: number | undefined;
  readonly outerMomentum?: number | undefined;
  readonly topkDensity?: number;
  /** With top-k: the error-feedback decay β (the config's default when absent). */
  readonly errorFeedbackDecay?: number | undefined;
  /** With DiLoCo: overlap the outer all-reduce with the next round's inner steps. */
  readonly overlap?: boolean;
  readonly averaging?: NonNullable<ExperimentConfigInput["averaging"]>;
}

/**
 * The experiment config of one variant: `dedloc` with the default adaptive compression and the
 * model's target batch; `diloco-*` with a round target of H × that, uncompressed (fp32), int8
 * (blockwise8) or top-k with error feedback. Everything else is the same.
 */
export function variantConfig(variant: VariantName, options: VariantOptions): ExperimentConfigInput {
  const { bench } = options;
  const diloco = variant !== "dedloc";
  return {
    model: bench.model,
    training: {
      targetBatchSize: diloco ? options.h * bench.targetBatchSize : bench.targetBatchSize,
      localBatchSize: bench.localBatchSize,
    },
    optimizer: { name: "adam", learningRate: options.learningRate },
    compression:
      variant === "dedloc"
        ? { method: "adaptive" }
        : variant === "diloco-fp32"
          ? { method: "none" }
          : variant === "diloco-int8"
            ? { method: "blockwise8" }
            : {
                method: "topk",
                ...(options.topkDensity === undefined ? {} : { topkDensity: options.topkDensity }),
                ...(options.errorFeedbackDecay === undefined
                  ? {}
                  : { errorFeedbackDecay: options.errorFeedbackDecay }),
              },
    averaging: {
      ...options.averaging,
      strategy: diloco ? "diloco" : "dedloc",
      outerOptimizer: {
        learningRate: options.outerLearningRate ?? (variant === "diloco-topk" ? 1 : 0.7),
        momentum: options.outerMomentum ?? (variant === "diloco-topk" ? 0 : 0.9),
      },
      delayedParameterUpdates: diloco && options.overlap === true,
    },
  };
}

/** The prepared dataset a preset trains on, read from disk as a peer reads it from the platform. */
export interface BenchDataset {
  readonly source: DirectoryDatasetSource;
  readonly manifest: DatasetManifest;
}

/** Prepares (or finds up to date) the dataset of model `kind` under `dataDir`. */
export async function prepareBenchDataset(dataDir: string, kind: BenchPreset): Promise<BenchDataset> {
  const dataset = builtInModelDataset[kind];
  await prepareDatasets({ storage: new LocalObjectStore(dataDir), datasets: [dataset] });
  const source = new DirectoryDatasetSource({ dir: join(datasetsDir(dataDir), dataset), dataset });
  return { source, manifest: await source.manifest() };
}

/** Opens and closes intervals of `computeGradients`, in `performance.now()` ms. */
export interface ComputeClock {
  readonly intervals: Array<readonly [number, number]>;
}

/**
 * `fn`, with the start and end of every call added to `clock` (for a promise, its settling), also
 * when it throws.
 */
export function timed<A extends unknown[], R>(clock: ComputeClock, fn: (...args: A) => R): (...args: A) => R {
  return (...args) => {
    const start = performance.now();
    const done = (): void => {
      clock.intervals.push([start, performance.now()]);
    };
    let result: R;
    try {
      result = fn(...args);
    } catch (error) {
      done();
      throw error;
    }
    if (result instanceof Promise) return result.finally(done) as R;
    done();
    return result;
  };
}

/**
 * `model`, with every `computeGradients` call's start and end added to `clock`, and every
 * `setParameters` call's to `loadClock` when given.
 */
export function timedModel(
  model: TrainableModel,
  clock: ComputeClock,
  loadClock?: ComputeClock,
): TrainableModel {
  const setParameters = (parameters: Float32Array): void => {
    model.setParameters(parameters);
  };
  return {
    config: model.config,
    kind: model.kind,
    layout: model.layout,
    initialParameters: (seed) => model.initialParameters(seed),
    setParameters: loadClock === undefined ? setParameters : timed(loadClock, setParameters),
    computeGradients: timed(clock, (batch: Batch, seed: number) => model.computeGradients(batch, seed)),
    evaluate: (batch) => model.evaluate(batch),
    dispose: () => {
      model.dispose();
    },
  };
}

/** Seconds of `clock`'s intervals that fall within [from, to] (ms). */
export function secondsWithin(clock: ComputeClock, from: number, to: number): number {
  let total = 0;
  for (const [start, end] of clock.intervals) total += Math.max(0, Math.min(end, to) - Math.max(start, from));
  return total / 1000;
}

/** The machine's busy and total CPU time so far, in jiffies, from /proc/stat ([NaN, NaN] without it). */
export function machineJiffies(): readonly [number, number] {
  try {
    const line = readFileSync("/proc/stat", "utf8").split("\n")[0] ?? "";
    const fields = line.trim().split(/\s+/).slice(1).map(Number);
    const total = fields.reduce((sum, value) => sum + value, 0);
    const idle = (fields[3] ?? 0) + (fields[4] ?? 0);
    return [total - idle, total];
  } catch {
    return [NaN, NaN];
  }
}

/** Cores the whole machine kept busy between two `machineJiffies` readings (other processes too). */
export function busyCores(before: readonly [number, number], after: readonly [number, number]): number {
  return ((after[0] - before[0]) / Math.max(1, after[1] - before[1])) * availableParallelism();
}
