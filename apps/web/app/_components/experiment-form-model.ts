import {
  Aggregation,
  AveragingStrategy,
  CompressionMethod,
  UPLOADED_MODEL,
  BuiltInModel,
  ModelTask,
  builtInModelDataset,
  taskChoices,
  safeParseExperimentConfig,
  type ExperimentConfig,
  type ExperimentConfigInput,
} from "@barnraise/protocol";

/**
 * The experiment form's data: the values of its fields, how they become an experiment config, and
 * how validation issues (from the protocol's config schema in the browser, or from the API) find
 * the field they belong to. Pure, so the form component stays about rendering.
 */

/** The form's fields, each named by the API path of the value it edits. */
export const Field = {
  id: "id",
  name: "name",
  description: "description",
  kind: "config.model.kind",
  hiddenUnits: "config.model.hiddenUnits",
  modelSha256: "config.model.sha256",
  task: "config.model.task",
  loss: "config.model.loss",
  datasetName: "config.dataset.name",
  vocabSize: "config.model.vocabSize",
  embeddingSize: "config.model.embeddingSize",
  hiddenSize: "config.model.hiddenSize",
  numLayers: "config.model.numLayers",
  numHeads: "config.model.numHeads",
  intermediateSize: "config.model.intermediateSize",
  maxSequenceLength: "config.model.maxSequenceLength",
  targetBatchSize: "config.training.targetBatchSize",
  localBatchSize: "config.training.localBatchSize",
  maxSteps: "config.training.maxSteps",
  strategy: "config.averaging.strategy",
  outerLearningRate: "config.averaging.outerOptimizer.learningRate",
  outerMomentum: "config.averaging.outerOptimizer.momentum",
  outerNesterov: "config.averaging.outerOptimizer.nesterov",
  optimizer: "config.optimizer.name",
  learningRate: "config.optimizer.learningRate",
  compression: "config.compression.method",
  topkDensity: "config.compression.topkDensity",
  errorFeedbackDecay: "config.compression.errorFeedbackDecay",
  maxGroupSize: "config.averaging.maxGroupSize",
  loadBalancing: "config.averaging.loadBalancing",
  delayedParameterUpdates: "config.averaging.delayedParameterUpdates",
  aggregation: "config.averaging.aggregation",
  clipTau: "config.averaging.centeredClip.tau",
  clipIterations: "config.averaging.centeredClip.iterations",
  checkpointEvery: "config.checkpoints.everySteps",
} as const;
export type Field = (typeof Field)[keyof typeof Field];

/** The fields in the order the form shows them. */
export const fieldOrder: readonly Field[] = Object.values(Field);

export type AlbertSize =
  | "vocabSize"
  | "embeddingSize"
  | "hiddenSize"
  | "numLayers"
  | "numHeads"
  | "intermediateSize"
  | "maxSequenceLength";

export const albertSizes: readonly { key: AlbertSize; label: string; hint: string }[] = [
  { key: "vocabSize", label: "Vocabulary size", hint: "64 to 65,536 tokens" },
  { key: "embeddingSize", label: "Embedding size", hint: "Factorized embeddings, as in ALBERT" },
  { key: "hiddenSize", label: "Hidden size", hint: "Divisible by the number of heads" },
  { key: "numLayers", label: "Layers", hint: "All layers share one set of weights" },
  { key: "numHeads", label: "Attention heads", hint: "1 to 64" },
  { key: "intermediateSize", label: "Feed-forward size", hint: "8 to 16,384" },
  { key: "maxSequenceLength", label: "Sequence length", hint: "Tokens per sample, 8 to 2,048" },
];

/** What the fields hold, as typed (numbers stay text until the config is built). */
export interface FormValues {
  id: string;
  name: string;
  description: string;
  kind: ExperimentConfig["model"]["kind"];
  hiddenUnits: string;
  /** An uploaded model's SHA-256 (model kind "uploaded"). */
  modelSha256: string;
  task: ModelTask;
  /** "" for the task's default loss. */
  loss: string;
  /** The uploaded dataset an uploaded model (or the masked LM, when not empty) trains on. */
  datasetName: string;
  albert: Record<AlbertSize, string>;
  targetBatchSize: string;
  localBatchAuto: boolean;
  localBatchSize: string;
  maxSteps: string;
  strategy: ExperimentConfig["averaging"]["strategy"];
  /** DiLoCo's outer optimizer (shown, and applied, only with that strategy). */
  outerLearningRate: string;
  outerMomentum: string;
  outerNesterov: boolean;
  optimizer: ExperimentConfig["optimizer"]["name"];
  learningRate: string;
  compression: ExperimentConfig["compression"]["method"];
  /** Applied only with top-k compression. */
  topkDensity: string;
  errorFeedbackDecay: string;
  maxGroupSize: string;
  loadBalancing: boolean;
  delayedParameterUpdates: boolean;
  aggregation: ExperimentConfig["averaging"]["aggregation"];
  /** CenteredClip's τ and iterations, applied only with that aggregation. */
  clipTau: string;
  clipIterations: string;
  checkpointEvery: string;
}

export const aggregationOptions: readonly { value: FormValues["aggregation"]; label: string }[] = [
  { value: Aggregation.mean, label: "Weighted mean" },
  { value: Aggregation.centeredClip, label: "CenteredClip: robust to a few malicious peers" },
];

export const strategyOptions: readonly { value: FormValues["strategy"]; label: string }[] = [
  { value: AveragingStrategy.dedloc, label: "DeDLOC: gradient averaging, one shared step" },
  { value: AveragingStrategy.diloco, label: "DiLoCo: local steps, outer Nesterov step" },
];

/**
 * The samples per round the form suggests for DiLoCo: each round is many local steps of every peer,
 * so it is far larger than a DeDLOC batch.
 */
export const DILOCO_TARGET_BATCH_SIZE = 16_384;

export const compressionOptions: readonly { value: FormValues["compression"]; label: string }[] = [
  { value: CompressionMethod.adaptive, label: "Adaptive (recommended)" },
  { value: CompressionMethod.blockwise8, label: "Blockwise 8-bit" },
  { value: CompressionMethod.quantile8, label: "8-bit quantile" },
  { value: CompressionMethod.uniform8, label: "8-bit uniform" },
  { value: CompressionMethod.fp16, label: "Half precision (fp16)" },
  { value: CompressionMethod.none, label: "None (32-bit floats)" },
  { value: CompressionMethod.topk, label: "Top-k 1.5 % + error feedback" },
];

export const modelKindOptions: readonly { value: FormValues["kind"]; label: string }[] = [
  { value: BuiltInModel.mnistMlp, label: "MNIST MLP: handwritten digits, fast" },
  { value: BuiltInModel.albertMlm, label: "ALBERT masked language model on the Brown corpus" },
  { value: UPLOADED_MODEL, label: "Your own model (TensorFlow.js Layers) on your own data" },
];

export const taskOptions: readonly { value: ModelTask; label: string }[] = [
  { value: ModelTask.classification, label: "Classification (a class per row)" },
  { value: ModelTask.regression, label: "Regression (a number per row)" },
  { value: ModelTask.nextToken, label: "Next-token language modelling (a text)" },
  { value: ModelTask.maskedTokens, label: "Masked language modelling (a text)" },
];

/** The losses that fit a task, for the form's select. */
export function lossOptions(task: ModelTask): readonly string[] {
  return taskChoices[task].losses;
}

/** The complete config with every default applied: what a new experiment starts from. */
export function defaultConfig(): ExperimentConfig {
  const parsed = safeParseExperimentConfig({});
  if (!parsed.ok) throw new Error("the default experiment config does not validate");
  return parsed.config;
}

/** The target batch size a new experiment gets with `strategy`: the schema's, or DiLoCo's suggestion. */
export function defaultTargetBatchSize(strategy: FormValues["strategy"]): number {
  return strategy === AveragingStrategy.diloco
    ? DILOCO_TARGET_BATCH_SIZE
    : defaultConfig().training.targetBatchSize;
}

/** The form with `next` strategy; a target batch size left at the old one's default follows the new one's. */
export function withStrategy(values: FormValues, next: FormValues["strategy"]): FormValues {
  const untouched = Number(values.targetBatchSize) === defaultTargetBatchSize(values.strategy);
  return {
    ...values,
    strategy: next,
    targetBatchSize: untouched ? String(defaultTargetBatchSize(next)) : values.targetBatchSize,
  };
}

/**
 * DiLoCo's outer optimizer the form suggests for a compression: with top-k, error feedback already
 * carries every round's unsent update into the next, as momentum would, so SparseLoCo's plain outer
 * SGD of rate 1 without momentum (measured: Nesterov 0.9 on top of it overshoots and the loss grows
 * round after round); otherwise DiLoCo's Nesterov SGD (0.7, 0.9).
 */
export function suggestedOuterOptimizer(
  compression: FormValues["compression"],
): Pick<FormValues, "outerLearningRate" | "outerMomentum"> {
  if (compression === CompressionMethod.topk) return { outerLearningRate: "1", outerMomentum: "0" };
  const { outerOptimizer } = defaultConfig().averaging;
  return {
    outerLearningRate: String(outerOptimizer.learningRate),
    outerMomentum: String(outerOptimizer.momentum),
  };
}

/** The form with `next` compression; an outer optimizer left at the old suggestion follows the new one. */
export function withCompression(values: FormValues, next: FormValues["compression"]): FormValues {
  const old = suggestedOuterOptimizer(values.compression);
  const untouched =
    Number(values.outerLearningRate) === Number(old.outerLearningRate) &&
    Number(values.outerMomentum) === Number(old.outerMomentum);
  return { ...values, compression: next, ...(untouched ? suggestedOuterOptimizer(next) : {}) };
}

export function defaultLearningRate(optimizer: FormValues["optimizer"]): number {
  const parsed = safeParseExperimentConfig({ optimizer: { name: optimizer } });
  if (!parsed.ok) throw new Error(`the default ${optimizer} config does not validate`);
  return parsed.config.optimizer.learningRate;
}

const albertDefaults = (() => {
  const parsed = safeParseExperimentConfig({ model: { kind: BuiltInModel.albertMlm } });
  if (!parsed.ok || parsed.config.model.kind !== BuiltInModel.albertMlm) {
    throw new Error("the default albert-mlm config does not validate");
  }
  return parsed.config.model;
})();

export function formValuesOf(
  experiment: { id: string; name: string; description: string },
  config: ExperimentConfig,
): FormValues {
  const { model, averaging } = config;
  const albert = model.kind === BuiltInModel.albertMlm ? model : albertDefaults;
  return {
    id: experiment.id,
    name: experiment.name,
    description: experiment.description,
    kind: model.kind,
    hiddenUnits: model.kind === BuiltInModel.mnistMlp ? model.hiddenUnits.join(", ") : "128, 64",
    modelSha256: model.kind === UPLOADED_MODEL ? model.sha256 : "",
    task: model.kind === UPLOADED_MODEL ? model.task : ModelTask.classification,
    loss: model.kind === UPLOADED_MODEL ? model.loss : "",
    // A preset's own dataset shows as empty; an uploaded model's, or an imported text's, by name.
    datasetName:
      model.kind === UPLOADED_MODEL || config.dataset.name !== builtInModelDataset[model.kind]
        ? config.dataset.name
        : "",
    albert: {
      vocabSize: String(albert.vocabSize),
      embeddingSize: String(albert.embeddingSize),
      hiddenSize: String(albert.hiddenSize),
      numLayers: String(albert.numLayers),
      numHeads: String(albert.numHeads),
      intermediateSize: String(albert.intermediateSize),
      maxSequenceLength: String(albert.maxSequenceLength),
    },
    targetBatchSize: String(config.training.targetBatchSize),
    localBatchAuto: config.training.localBatchSize === "auto",
    localBatchSize: config.training.localBatchSize === "auto" ? "32" : String(config.training.localBatchSize),
    maxSteps: config.training.maxSteps === undefined ? "" : String(config.training.maxSteps),
    strategy: averaging.strategy,
    outerLearningRate: String(averaging.outerOptimizer.learningRate),
    outerMomentum: String(averaging.outerOptimizer.momentum),
    outerNesterov: averaging.outerOptimizer.nesterov,
    optimizer: config.optimizer.name,
    learningRate: String(config.optimizer.learningRate),
    compression: config.compression.method,
    topkDensity: String(config.compression.topkDensity),
    errorFeedbackDecay: String(config.compression.errorFeedbackDecay),
    maxGroupSize: String(averaging.maxGroupSize),
    loadBalancing: averaging.loadBalancing,
    delayedParameterUpdates: averaging.delayedParameterUpdates,
    aggregation: averaging.aggregation,
    clipTau: String(averaging.centeredClip.tau),
    clipIterations: String(averaging.centeredClip.iterations),
    checkpointEvery: String(config.checkpoints.everySteps),
  };
}

export type FieldErrors = Partial<Record<Field, string>>;

export type BuildResult =
  { ok: true; config: ExperimentConfigInput } | { ok: false; errors: FieldErrors; other: string[] };

/**
 * The config the form describes, built over `base` (the experiment's current config) so settings the
 * form does not show are kept (the outer optimizer under DeDLOC, the top-k density under other
 * compressions), then validated with the protocol's schema.
 */
export function buildConfig(values: FormValues, base: ExperimentConfig): BuildResult {
  const errors: FieldErrors = {};
  const number = (field: Field, text: string): number | undefined => {
    const trimmed = text.trim().replace(/_/g, "");
    const value = trimmed === "" ? Number.NaN : Number(trimmed);
    if (!Number.isFinite(value)) {
      errors[field] = "Enter a number.";
      return undefined;
    }
    return value;
  };

  let model: Record<string, unknown>;
  if (values.kind === BuiltInModel.mnistMlp) {
    const parts = values.hiddenUnits.split(/[\s,]+/).filter((part) => part !== "");
    const units = parts.map(Number);
    if (parts.length === 0 || units.some((unit) => !Number.isFinite(unit))) {
      errors[Field.hiddenUnits] = "Enter layer sizes as numbers separated by commas, e.g. 128, 64.";
    }
    model = {
      ...(base.model.kind === values.kind ? base.model : {}),
      kind: values.kind,
      hiddenUnits: units,
    };
  } else if (values.kind === UPLOADED_MODEL) {
    if (values.modelSha256 === "") errors[Field.modelSha256] = "Upload the model’s files first.";
    if (values.datasetName.trim() === "")
      errors[Field.datasetName] = "Upload a dataset, or name one already uploaded.";
    const loss = lossOptions(values.task).includes(values.loss) ? values.loss : undefined;
    model = {
      kind: values.kind,
      sha256: values.modelSha256,
      task: values.task,
      ...(loss === undefined ? {} : { loss }),
    };
  } else {
    model = { ...(base.model.kind === values.kind ? base.model : {}), kind: values.kind };
    for (const { key } of albertSizes) model[key] = number(Field[key], values.albert[key]);
  }

  const localBatchSize = values.localBatchAuto ? "auto" : number(Field.localBatchSize, values.localBatchSize);
  const maxSteps = values.maxSteps.trim() === "" ? undefined : number(Field.maxSteps, values.maxSteps);
  const { maxSteps: _previousMaxSteps, ...training } = base.training;
  const { name: _builtInModelDataset, ...dataset } = base.dataset;
  const config = {
    ...base,
    model,
    training: {
      ...training,
      targetBatchSize: number(Field.targetBatchSize, values.targetBatchSize),
      localBatchSize,
      ...(maxSteps === undefined ? {} : { maxSteps }),
    },
    optimizer: {
      ...(base.optimizer.name === values.optimizer ? base.optimizer : {}),
      name: values.optimizer,
      learningRate: number(Field.learningRate, values.learningRate),
    },
    compression: {
      ...base.compression,
      method: values.compression,
      ...(values.compression === CompressionMethod.topk
        ? {
            topkDensity: number(Field.topkDensity, values.topkDensity),
            errorFeedbackDecay: number(Field.errorFeedbackDecay, values.errorFeedbackDecay),
          }
        : {}),
    },
    averaging: {
      ...base.averaging,
      strategy: values.strategy,
      outerOptimizer:
        values.strategy === AveragingStrategy.diloco
          ? {
              ...base.averaging.outerOptimizer,
              learningRate: number(Field.outerLearningRate, values.outerLearningRate),
              momentum: number(Field.outerMomentum, values.outerMomentum),
              nesterov: values.outerNesterov,
            }
          : base.averaging.outerOptimizer,
      maxGroupSize: number(Field.maxGroupSize, values.maxGroupSize),
      loadBalancing: values.loadBalancing,
      delayedParameterUpdates: values.delayedParameterUpdates,
      aggregation: values.aggregation,
      centeredClip:
        values.aggregation === Aggregation.centeredClip
          ? {
              tau: number(Field.clipTau, values.clipTau),
              iterations: number(Field.clipIterations, values.clipIterations),
            }
          : base.averaging.centeredClip,
    },
    // A preset's dataset follows from it (the schema fills it in); an uploaded model names its own.
    // The masked LM may name an imported text instead.
    dataset:
      values.kind === UPLOADED_MODEL ||
      (values.kind === BuiltInModel.albertMlm && values.datasetName.trim() !== "")
        ? { ...dataset, name: values.datasetName.trim() }
        : dataset,
    checkpoints: { ...base.checkpoints, everySteps: number(Field.checkpointEvery, values.checkpointEvery) },
  };
  if (Object.keys(errors).length > 0) return { ok: false, errors, other: [] };

  const parsed = safeParseExperimentConfig(config);
  if (parsed.ok) return { ok: true, config: config as ExperimentConfigInput };
  return {
    ok: false,
    ...placeIssues(parsed.issues.map((issue) => ({ ...issue, path: prefixed(issue.path) }))),
  };
}

function prefixed(path: string): string {
  return path === "" ? "config" : `config.${path}`;
}

/**
 * Each issue under the field whose path is the longest prefix of the issue's path (an issue at
 * "config.model.hiddenUnits.2" goes under the hidden-units field); the rest as sentences.
 */
export function placeIssues(issues: readonly { path: string; message: string }[]): {
  errors: FieldErrors;
  other: string[];
} {
  const errors: FieldErrors = {};
  const other: string[] = [];
  for (const issue of issues) {
    const field = fieldOrder
      .filter((path) => issue.path === path || issue.path.startsWith(`${path}.`))
      .sort((a, b) => b.length - a.length)[0];
    const message = humanMessage(issue.message, field);
    if (field === undefined) other.push(issue.path === "" ? message : `${issue.path}: ${message}`);
    else errors[field] ??= message;
  }
  return { errors, other };
}

/** Config keys that the schema's own messages mention, as the form names them. */
const identifierWords: Record<string, string> = {
  hiddenSize: "the hidden size",
  numHeads: "the number of attention heads",
};

/** Zod's messages, rephrased for a person filling in the form. */
export function humanMessage(message: string, field?: Field): string {
  const bound =
    /^Too (small|big): expected (number|array|string) to (?:be|have) ([<>]=?)(\S+?)(?: (items|characters))?$/.exec(
      message,
    );
  if (bound) {
    const [, , kind, op, limit] = bound;
    const amount =
      kind === "array"
        ? `${limit} value${limit === "1" ? "" : "s"}`
        : kind === "string"
          ? `${limit} characters`
          : limit;
    if (kind === "number") {
      if (op === ">=") return `Must be at least ${amount}.`;
      if (op === ">") return `Must be greater than ${amount}.`;
      if (op === "<=") return `Must be at most ${amount}.`;
      return `Must be less than ${amount}.`;
    }
    return op?.startsWith(">") ? `Enter at least ${amount}.` : `Enter at most ${amount}.`;
  }
  if (/expected int/.test(message)) return "Must be a whole number.";
  if (message === "Invalid input" && field === Field.localBatchSize) {
    return "Must be a whole number from 1 to 65,536, or automatic.";
  }
  const worded = message.replace(/\b(hiddenSize|numHeads)\b/g, (name) => identifierWords[name] ?? name);
  const sentence = worded.charAt(0).toUpperCase() + worded.slice(1);
  return /[.!?]$/.test(sentence) ? sentence : `${sentence}.`;
}
