import {
  heldOutMetricOf,
  HeldOutMetric,
  MetricName,
  type DatasetManifest,
  type ExperimentConfig,
  type ModelConfig,
} from "@barnraise/protocol";
import { createBatchStream } from "../data/batch-stream.ts";
import { CachedDatasetSource } from "../data/cached-dataset-source.ts";
import type { DatasetSource } from "../data/dataset-source.ts";
import { HttpDatasetSource } from "../data/http-dataset-source.ts";
import { heldOutModelConfig, loadModel } from "../models/model-kinds.ts";
import type { TrainableModel } from "../models/trainable-model.ts";
import { hashName } from "../seeded-random.ts";
import type { BlobStore } from "../storage/blob-store.ts";
import {
  BackendUnavailableError,
  selectBackend,
  type BackendLoaders,
  type SelectedBackend,
} from "../tf/backend.ts";
import { evaluateModel, type Evaluation } from "./evaluate.ts";

/**
 * A model's score on its dataset's test split in the figure its task is judged by (see
 * `heldOutMetricOf`): what the organizer's aux computes for every checkpoint, with the peer's own
 * model and data code, so the number means exactly what training optimizes.
 */

export interface HeldOutScore {
  readonly metric: HeldOutMetric;
  readonly value: number;
  /** Mean loss over the predictions scored (cross-entropy, or the regression's loss). */
  readonly loss: number;
  /** Predictions scored: test rows, or predicted tokens for a language model. */
  readonly samples: number;
}

/**
 * The seed of the held-out batches. The test split is read in manifest order whatever the seed,
 * but the masked LM draws its masks from it: a fixed one masks the same tokens every time, so two
 * evaluations of one state agree and the scores of successive checkpoints compare like with like.
 */
export const HELD_OUT_SEED = hashName("barnraise held-out evaluation");

export {
  HELD_OUT_ACTIVATIONS_PER_BATCH,
  HELD_OUT_BATCH_SIZE,
  HELD_OUT_TOKENS_PER_BATCH,
} from "./held-out-sizes.ts";

/**
 * The score of `evaluation` (of a model of config `model`) in its held-out metric: the accuracy,
 * exp of the mean cross-entropy per predicted token, or the mean absolute error. Throws when the figure is
 * not a finite number (a diverged model), which no platform would record.
 */
export function heldOutScore(model: ModelConfig, evaluation: Evaluation): HeldOutScore {
  const metric = heldOutMetricOf(model);
  const value =
    metric === HeldOutMetric.accuracy
      ? evaluation.accuracy
      : metric === HeldOutMetric.perplexity
        ? Math.exp(evaluation.loss)
        : evaluation.metrics?.[MetricName.meanAbsoluteError];
  if (value === undefined || !Number.isFinite(value) || !Number.isFinite(evaluation.loss)) {
    throw new Error(
      `the held-out evaluation gave ${metric} ${String(value)} and loss ${evaluation.loss}: the model's outputs are not finite`,
    );
  }
  return { metric, value, loss: evaluation.loss, samples: evaluation.predictions };
}

export interface HeldOutEvaluatorOptions {
  readonly config: ExperimentConfig;
  /** The platform: it serves the dataset's shards and an uploaded model's files. */
  readonly server: URL;
  /**
   * Where verified files are kept: the dataset's shards in `datasets/<name>`, an uploaded model in
   * `models` (for the aux, its data directory). Nothing is kept without it.
   */
  readonly cache?: BlobStore;
  /** How this runtime loads the wasm and cpu backends (`nodeBackendLoaders` in Node.js). */
  readonly backends: Pick<Partial<BackendLoaders>, "wasm" | "cpu">;
  /** Where the test split comes from; the platform's shards, cached, by default. */
  readonly source?: DatasetSource;
  /** Rows per batch; the model kind's `heldOutBatchSize` by default. */
  readonly batchSize?: number;
  /** Cancels the downloads of opening. */
  readonly signal?: AbortSignal;
  /** Progress lines (an uploaded model's download). */
  readonly log?: (line: string) => void;
  /** Told when a cache cannot be used, or the wasm backend is unavailable. */
  readonly warn?: (message: string, error: unknown) => void;
}

/**
 * Scores flat parameter vectors of one experiment's model on its test split, one at a time. Opening
 * it selects a CPU backend (WebAssembly, else plain JavaScript: the aux runs on a small CPU machine
 * and must not take a GPU runtime's memory), builds the model and reads the dataset's manifest.
 * TF.js has one engine per process: do not open two evaluators, or one beside a trainer, at once.
 */
export class HeldOutEvaluator {
  readonly backend: SelectedBackend;
  readonly #options: HeldOutEvaluatorOptions;
  readonly #model: TrainableModel;
  readonly #source: DatasetSource;
  readonly #manifest: DatasetManifest;

  private constructor(
    options: HeldOutEvaluatorOptions,
    backend: SelectedBackend,
    model: TrainableModel,
    source: DatasetSource,
    manifest: DatasetManifest,
  ) {
    this.#options = options;
    this.backend = backend;
    this.#model = model;
    this.#source = source;
    this.#manifest = manifest;
  }

  static async open(options: HeldOutEvaluatorOptions): Promise<HeldOutEvaluator> {
    const { config } = options;
    const backend = await selectCpuBackend(options.backends, options.warn);
    const { cache } = options;
    const model = await loadModel(heldOutModelConfig(config.model), {
      server: options.server,
      ...(cache === undefined ? {} : { cache: cache.within("models") }),
      ...(options.signal === undefined ? {} : { signal: options.signal }),
      ...(options.log === undefined ? {} : { log: options.log }),
      ...(options.warn === undefined ? {} : { warn: options.warn }),
    });
    try {
      const shards = new HttpDatasetSource({ serverUrl: options.server.href, dataset: config.dataset.name });
      const source =
        options.source ??
        (cache === undefined
          ? shards
          : new CachedDatasetSource(
              shards,
              cache.within("datasets").within(config.dataset.name),
              options.warn,
            ));
      const manifest = await source.manifest(options.signal);
      return new HeldOutEvaluator(options, backend, model, source, manifest);
    } catch (error) {
      model.dispose();
      throw error;
    }
  }

  /** The parameter count a vector must have. */
  get parameterCount(): number {
    return this.#model.layout.size;
  }

  /**
   * The held-out score of `parameters` (length `parameterCount`): one ordered pass over the test
   * split, yielding to the event loop between (short) batches. Rejects when `signal` aborts, when the
   * dataset does not fit the model, or when the score is not finite.
   */
  async evaluate(parameters: Float32Array, signal?: AbortSignal): Promise<HeldOutScore> {
    return heldOutScore(this.#options.config.model, await this.#evaluate(parameters, signal, undefined));
  }

  /**
   * The mean loss of `parameters` over the first `options.maxBatches` batches of the test split:
   * always the same rows (and masks), a fixed subset quick enough to score many vectors (the aux's
   * contribution validator steps θ by each peer's contribution and compares the losses). A loss
   * that is not finite (the parameters make the model diverge) is +Infinity, not an error.
   */
  async loss(
    parameters: Float32Array,
    signal: AbortSignal | undefined,
    options: { readonly maxBatches: number },
  ): Promise<number> {
    const { maxBatches } = options;
    if (!(Number.isSafeInteger(maxBatches) && maxBatches >= 1)) {
      throw new RangeError(`maxBatches must be a positive integer, not ${maxBatches}`);
    }
    const { loss } = await this.#evaluate(parameters, signal, maxBatches);
    return Number.isFinite(loss) ? loss : Number.POSITIVE_INFINITY;
  }

  async #evaluate(
    parameters: Float32Array,
    signal: AbortSignal | undefined,
    maxBatches: number | undefined,
  ): Promise<Evaluation> {
    const { config } = this.#options;
    if (parameters.length !== this.parameterCount) {
      throw new RangeError(
        `the state has ${parameters.length} parameters, the experiment's model ${this.parameterCount}`,
      );
    }
    const batches = createBatchStream({
      source: this.#source,
      split: "test",
      batchSize: this.#options.batchSize ?? this.#model.kind.heldOutBatchSize,
      seed: HELD_OUT_SEED,
      config,
      manifest: this.#manifest,
      kind: this.#model.kind,
      ...(signal === undefined ? {} : { signal }),
    });
    try {
      const scored = maxBatches === undefined ? batches : firstItems(batches, maxBatches);
      return await evaluateModel(this.#model, parameters, scored, signal);
    } finally {
      await batches.return();
    }
  }

  /** Frees the model's tensors. */
  dispose(): void {
    this.#model.dispose();
  }
}

/** The first `count` items of `items`. */
async function* firstItems<T>(items: AsyncIterable<T>, count: number): AsyncGenerator<T, void, undefined> {
  let taken = 0;
  for await (const item of items) {
    yield item;
    taken += 1;
    if (taken >= count) return;
  }
}

/**
 * WebAssembly, else plain JavaScript, as the peer's `--backend wasm` and `--backend cpu` select
 * them; a missing wasm binary is reported through `warn`, not fatal.
 */
async function selectCpuBackend(
  loaders: Partial<BackendLoaders>,
  warn: ((message: string, error: unknown) => void) | undefined,
): Promise<SelectedBackend> {
  try {
    return await selectBackend("wasm", { loaders });
  } catch (error) {
    if (!(error instanceof BackendUnavailableError)) throw error;
    warn?.(`${error.message}; evaluating on the plain JavaScript backend`, error);
    return selectBackend("cpu", { loaders });
  }
}
