import {
  elementCount,
  isLanguageModelTask,
  UPLOADED_MODEL,
  layersModelLayers,
  BuiltInModel,
  builtInModelDataset,
  type DatasetManifest,
  type ExperimentConfig,
  type UploadedModelConfig,
  type LayersModelJson,
} from "@barnraise/protocol";
import { AppError, AppErrorCode, type InputIssue } from "../app-error.ts";
import { isAppError } from "../app-error.ts";
import type { AppContext } from "../context.ts";
import { getDatasetManifest } from "../datasets/dataset-store.ts";
import { readStoredModel } from "../models/model-store.ts";

/**
 * Before a run over an uploaded model is published (or its config changed): the model is stored,
 * the dataset is prepared, and they fit each other: the model's input takes one record's features
 * (or one image's pixels), and its output and the loss fit the label (classes for classification,
 * one value for regression); a language model reads token ids and predicts the text's vocabulary. The masked LM on an imported text: the dataset is text whose
 * vocabulary the model embeds. Peers check the same again when they build their batches; this
 * gives the organizer the message in the form instead.
 */
export async function checkModelFitsDataset(ctx: AppContext, config: ExperimentConfig): Promise<void> {
  const { model } = config;
  const issues: InputIssue[] = [];
  const refuse = (path: string, message: string) => issues.push({ path: `config.${path}`, message });
  if (model.kind === BuiltInModel.albertMlm) {
    if (config.dataset.name !== builtInModelDataset[model.kind]) await checkTextDataset(ctx, config, refuse);
  } else if (model.kind === UPLOADED_MODEL) {
    await checkUploadedModel(ctx, config, model, refuse);
  }
  if (issues.length > 0) {
    throw new AppError(AppErrorCode.INVALID_INPUT, `${issues[0]?.path}: ${issues[0]?.message}`, { issues });
  }
}

type Refuse = (path: string, message: string) => void;

/** The masked LM on an imported text: a `tokens-u16le` dataset whose vocabulary the model embeds. */
async function checkTextDataset(ctx: AppContext, config: ExperimentConfig, refuse: Refuse): Promise<void> {
  const { model } = config;
  if (model.kind !== BuiltInModel.albertMlm) return;
  const manifest = await notFoundAsUndefined(getDatasetManifest(ctx.storage, config.dataset.name));
  if (manifest === undefined) {
    refuse("dataset.name", `dataset ${config.dataset.name} does not exist; upload and convert it first`);
  } else if (manifest.format !== "tokens-u16le") {
    refuse("dataset.name", `${model.kind} trains on a text dataset, not ${manifest.format}`);
  } else if (manifest.vocabulary.size > model.vocabSize) {
    refuse(
      "model.vocabSize",
      `${manifest.name}'s vocabulary has ${manifest.vocabulary.size} tokens; the model embeds ${model.vocabSize}`,
    );
  }
}

async function checkUploadedModel(
  ctx: AppContext,
  config: ExperimentConfig,
  model: UploadedModelConfig,
  refuse: Refuse,
): Promise<void> {
  const [storedModel, manifest] = await Promise.all([
    notFoundAsUndefined(readStoredModel(ctx.storage, model.sha256)),
    notFoundAsUndefined(getDatasetManifest(ctx.storage, config.dataset.name)),
  ]);
  const stored = storedModel?.model;
  if (stored === undefined)
    refuse("model.sha256", "no uploaded model has this SHA-256; upload the model first");
  if (manifest === undefined) {
    refuse("dataset.name", `dataset ${config.dataset.name} does not exist; upload and convert it first`);
    return;
  }
  if (isLanguageModelTask(model.task)) {
    checkLanguageModel(model, stored, manifest, refuse);
    return;
  }
  if (manifest.format !== "tabular-f32" && manifest.format !== "image-u8") {
    refuse(
      "dataset.name",
      `a ${model.task} model trains on an uploaded table or image archive, not ${manifest.format}` +
        (manifest.format === "tokens-u16le" ? "; for a text, choose next-token or masked-tokens" : ""),
    );
    return;
  }
  if (stored === undefined) return;
  const inputs = elementCount(stored.inputShape);
  if (manifest.format === "image-u8") {
    const { image } = manifest.record;
    const values = image.height * image.width * image.channels;
    if (inputs !== values) {
      refuse(
        "model.sha256",
        `the model takes ${inputs} inputs (shape [${stored.inputShape.join(", ")}]); ${manifest.name}'s images are ` +
          `${image.height}×${image.width}×${image.channels} (${values} values)`,
      );
    }
    if (model.task !== "classification") {
      refuse("model.task", `${manifest.name}'s labels are classes (its folders); choose classification`);
      return;
    }
    checkClassifierOutput(model, stored, manifest.name, manifest.record.label.classes.length, refuse);
    return;
  }
  const { features, label } = manifest.record;
  if (inputs !== features.count) {
    refuse(
      "model.sha256",
      `the model takes ${inputs} inputs (shape [${stored.inputShape.join(", ")}]); ${manifest.name} has ${features.count} feature columns`,
    );
  }
  if (model.task === "classification") {
    if (label.kind !== "class" || label.classes === null) {
      refuse("model.task", `${manifest.name}'s label "${label.name}" is a number to regress on, not a class`);
    } else {
      checkClassifierOutput(model, stored, manifest.name, label.classes.length, refuse);
    }
    return;
  }
  if (label.kind !== "value") {
    refuse("model.task", `${manifest.name}'s label "${label.name}" is a class; choose classification`);
  }
  if (stored.outputUnits !== 1) {
    refuse("model.sha256", `a regression model needs one output unit; this one has ${stored.outputUnits}`);
  }
  if (stored.outputActivation === "softmax") {
    refuse("model.sha256", "a regression model's output cannot be a softmax");
  }
}

/** Layer classes that, as a language model's layers, would drop the sequence axis it predicts along. */
const SEQUENCE_DROPPING = new Set(["Flatten", "GlobalAveragePooling1D", "GlobalMaxPooling1D"]);
/** Layers that reshape the sequence in ways no check can follow: the positions may no longer be the tokens. */
const SEQUENCE_RESHAPING = new Set(["Reshape", "Permute", "RepeatVector"]);
const RECURRENT = new Set(["SimpleRNN", "GRU", "LSTM"]);
const WINDOWED = new Set(["Conv1D", "MaxPooling1D", "AveragePooling1D"]);

/** A size in a Keras layer config: a number, or a one-element list of one. */
function size(value: unknown): number {
  const first: unknown = Array.isArray(value) ? value[0] : value;
  return typeof first === "number" ? first : 1;
}

/**
 * Why a language model's layer cannot be trained for `task`, or undefined when it can: it must keep
 * one prediction per position (no flattening, pooling away or reshaping the sequence, no window
 * that shortens it), and for next-token prediction it must not let a position see a later token
 * (the label), which a centred window, a backwards recurrent layer or a normalization across
 * positions would. The peer checks the built model again (its output shape, and by changing
 * tokens that no earlier prediction moves).
 */
function languageModelLayerProblem(
  task: "next-token" | "masked-tokens",
  className: string,
  config: Readonly<Record<string, unknown>>,
): string | undefined {
  if (SEQUENCE_DROPPING.has(className) || (RECURRENT.has(className) && config.return_sequences !== true)) {
    return "drops the sequence axis; a language model predicts at every position (recurrent layers need return_sequences, and no Flatten or global pooling)";
  }
  if (SEQUENCE_RESHAPING.has(className)) {
    return "reshapes the sequence; a language model's layers must keep one position per token";
  }
  if (WINDOWED.has(className)) {
    const window = size(className === "Conv1D" ? config.kernel_size : config.pool_size);
    const strides = size(config.strides ?? (className === "Conv1D" ? 1 : window));
    const padding = typeof config.padding === "string" ? config.padding : "valid";
    if (strides > 1 || (window > 1 && padding !== "same")) {
      return `shortens the sequence (window ${window}, strides ${strides}, padding ${padding}); use padding "same" and strides 1`;
    }
    if (task === "next-token" && window > 1) {
      return `lets each position see the ${window >> 1} token(s) after it, which a next-token model must predict; use recurrent layers, or train a masked-tokens model`;
    }
  }
  if (task === "next-token" && RECURRENT.has(className) && config.go_backwards === true) {
    return "reads the sequence backwards, so each position sees the tokens after it, which a next-token model must predict";
  }
  if (task === "next-token" && className === "LayerNormalization") {
    const axes = Array.isArray(config.axis) ? (config.axis as unknown[]) : [config.axis ?? -1];
    if (axes.some((axis) => axis !== -1 && axis !== 2)) {
      return "normalizes across positions, so each position sees the tokens after it; normalize over the last axis only";
    }
  }
  return undefined;
}

/**
 * An uploaded language model (next-token or masked-tokens) on a text: it reads [positions] token
 * ids and predicts, at every position, a distribution over at least the dataset's vocabulary, which
 * its Embedding layers take in full, with layers that keep the positions (and, predicting the next
 * token, see none after their own).
 */
function checkLanguageModel(
  model: UploadedModelConfig,
  stored: LayersModelJson | undefined,
  manifest: DatasetManifest,
  refuse: Refuse,
): void {
  const task = model.task;
  if (task !== "next-token" && task !== "masked-tokens") return;
  if (manifest.format !== "tokens-u16le") {
    refuse("dataset.name", `a ${task} model trains on a text dataset, not ${manifest.format}`);
    return;
  }
  if (stored === undefined) return;
  const vocabulary = manifest.vocabulary.size;
  const [positions] = stored.inputShape;
  if (stored.inputShape.length !== 1 || positions === undefined) {
    refuse(
      "model.sha256",
      `a language model reads a sequence of token ids, input shape [positions]; this one takes [${stored.inputShape.join(", ")}]`,
    );
  } else if (task === "masked-tokens" && positions < 3) {
    refuse(
      "model.sha256",
      `a masked model reads [CLS] tokens… [SEP]: its input needs at least 3 positions, not ${positions}`,
    );
  }
  if (stored.outputUnits < vocabulary) {
    refuse(
      "model.sha256",
      `the model's output layer has ${stored.outputUnits} units; ${manifest.name}'s vocabulary has ${vocabulary} tokens (one unit per token)`,
    );
  }
  if (stored.outputActivation !== "softmax" && stored.outputActivation !== "linear") {
    refuse(
      "model.sha256",
      `a language model's output must be softmax (probabilities) or linear (logits) for ${model.loss}, not ${stored.outputActivation}`,
    );
  }
  for (const { className, config } of layersModelLayers(stored)) {
    const name = typeof config.name === "string" ? config.name : className;
    const problem = languageModelLayerProblem(task, className, config);
    if (problem !== undefined) {
      refuse("model.sha256", `its ${className} layer ${name} ${problem}`);
      return;
    }
    if (className === "Embedding" && typeof config.input_dim === "number" && config.input_dim < vocabulary) {
      refuse(
        "model.sha256",
        `its Embedding ${name} takes ${config.input_dim} token ids; ${manifest.name}'s vocabulary has ${vocabulary}`,
      );
    }
  }
}

/** A classifier: at least two classes, one output unit each, probabilities or logits out. */
function checkClassifierOutput(
  model: UploadedModelConfig,
  stored: { outputUnits: number; outputActivation: string },
  dataset: string,
  classes: number,
  refuse: Refuse,
): void {
  if (classes < 2) {
    refuse("dataset.name", `${dataset} has ${classes} class; classification needs at least 2`);
  } else if (stored.outputUnits !== classes) {
    refuse(
      "model.sha256",
      `the model's output layer has ${stored.outputUnits} units; ${dataset} has ${classes} classes`,
    );
  }
  if (stored.outputActivation !== "softmax" && stored.outputActivation !== "linear") {
    refuse(
      "model.loss",
      `${model.loss} needs a softmax (probabilities) or linear (logits) output, not ${stored.outputActivation}`,
    );
  }
}

async function notFoundAsUndefined<T>(promise: Promise<T>): Promise<T | undefined> {
  try {
    return await promise;
  } catch (error) {
    if (isAppError(error) && error.code === AppErrorCode.NOT_FOUND) return undefined;
    throw error;
  }
}
