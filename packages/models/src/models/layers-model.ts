import * as tf from "@tensorflow/tfjs-core";
// The union package: tfjs-layers builds the model; it shares tfjs-core's one engine (and backend).
import { io, loadLayersModel, type LayersModel, type LayerVariable } from "@tensorflow/tfjs";
import {
  layersModelTensors,
  MetricName,
  type UploadedModelConfig,
  type ModelTensor,
} from "@barnraise/protocol";
import { ParameterLayout } from "@barnraise/swarm";
import { deriveSeed } from "../seeded-random.ts";
import type { Batch } from "./batch.ts";
import { checkTabularBatch, checkTokenBatch } from "./batch-checks.ts";
import { gatherRows } from "./layer-ops.ts";
import type { LayersArtifact } from "./layers-artifact.ts";
import { outputLoss, outputMetrics, outputReading, type OutputReading } from "./layers-loss.ts";
import { checkSeed, ModelError, ModelErrorCode } from "./model-error.ts";
import type {
  EvaluationResult,
  GradientResult,
  TrainableModel,
  UploadedModelShape,
} from "./trainable-model.ts";
import { assignFlat, flatLossAndGradient } from "./variable-set.ts";
import type { ModelKind } from "./model-kind.ts";
import { uploadedModelKind } from "./uploaded-model-kind.ts";

/**
 * An organizer's uploaded TF.js Layers model (`model.kind: "uploaded"`), built by tfjs-layers from
 * its verified files. The flat vector is the trainable weights in the manifest's order (the
 * protocol's `layersModelTensors`), which is how every peer, checkpoint and export names them;
 * each maps to the built model's variable of the same original name. Every peer starts from the
 * uploaded weights, so `initialParameters` ignores its seed.
 *
 * The loss is the config's, computed on the model's output as `fit` would (plus the layers'
 * regularization terms), but under `tf.variableGrads` so that the swarm's optimizer, not TF.js's,
 * applies the step. Dropout layers draw from the step's seed; the recurrent layers' own dropout
 * masks come from TF.js's generator, which takes no seed.
 */
export class UploadedLayersModel implements TrainableModel {
  readonly config: UploadedModelConfig;
  readonly kind: ModelKind;
  readonly layout: ParameterLayout;
  readonly uploaded: UploadedModelShape;
  readonly #model: LayersModel;
  readonly #variables: readonly tf.Variable[];
  readonly #reading: OutputReading;
  readonly #initial: Float32Array;
  #disposed = false;

  private constructor(
    config: UploadedModelConfig,
    model: LayersModel,
    tensors: readonly ModelTensor[],
    variables: readonly tf.Variable[],
    reading: OutputReading,
    initial: Float32Array,
    uploaded: UploadedModelShape,
  ) {
    this.config = config;
    this.#model = model;
    this.#variables = variables;
    this.#reading = reading;
    this.#initial = initial;
    this.layout = ParameterLayout.fromShapes(tensors);
    this.uploaded = uploaded;
    this.kind = uploadedModelKind(config, uploaded);
  }

  /**
   * Builds the model `artifact` holds (checked against `config.sha256`) on the active backend.
   * Throws MODEL_INVALID when TF.js cannot build it, when its trainable weights are not the
   * manifest's, or when its output does not fit the config's task and loss.
   */
  static async load(config: UploadedModelConfig, artifact: LayersArtifact): Promise<UploadedLayersModel> {
    if (artifact.sha256 !== config.sha256) {
      throw new ModelError(
        ModelErrorCode.INVALID_CONFIG,
        `the files are model ${artifact.sha256}, the config names ${config.sha256}`,
      );
    }
    const parsed = artifact.model;
    const reading = outputReading(config.task, config.loss, parsed.outputActivation, parsed.outputUnits);
    let model: LayersModel;
    try {
      model = await loadLayersModel(
        io.fromMemory({
          modelTopology: parsed.modelTopology,
          weightSpecs: parsed.weights.map(({ name, shape }) => ({
            name,
            shape: [...shape],
            dtype: "float32",
          })),
          weightData: artifact.weights.buffer.slice(
            artifact.weights.byteOffset,
            artifact.weights.byteOffset + artifact.weights.byteLength,
          ),
        }),
      );
    } catch (error) {
      throw invalid(
        `TF.js cannot build it (${error instanceof Error ? error.message : String(error)})`,
        error,
      );
    }
    try {
      checkInputAndOutput(model, parsed.inputShape, reading);
      const uploaded = shapeOf(model);
      if (reading.task === "next-token") {
        const ids = Math.min(uploaded.tokenIds ?? reading.vocabulary, reading.vocabulary);
        await checkReadsOnlyEarlierTokens(model, uploaded.features, ids);
      }
      const tensors = layersModelTensors(parsed);
      const variables = matchVariables(model, tensors);
      const initial = new Float32Array(ParameterLayout.fromShapes(tensors).size);
      let offset = 0;
      for (const weight of parsed.weights) {
        if (!weight.trainable) continue;
        const length = weight.shape.reduce((product, size) => product * size, 1);
        // A copy, whatever the alignment of the downloaded bytes: float32 little-endian as stored.
        const bytes = artifact.weights.slice(weight.byteOffset, weight.byteOffset + length * 4);
        initial.set(new Float32Array(bytes.buffer), offset);
        offset += length;
      }
      return new UploadedLayersModel(config, model, tensors, variables, reading, initial, uploaded);
    } catch (error) {
      model.dispose();
      throw error;
    }
  }

  initialParameters(seed: number): Float32Array {
    checkSeed(seed, "initialization seed");
    return this.#initial.slice();
  }

  setParameters(parameters: Float32Array): void {
    this.#checkAlive();
    assignFlat(this.#variables, this.layout, parameters);
  }

  computeGradients(batch: Batch, seed: number): Promise<GradientResult> {
    // Bad input throws here, before any promise: only the computation is asynchronous.
    this.#checkAlive();
    checkSeed(seed, "dropout seed");
    const rows = this.#check(batch);
    this.#seedDropout(seed);
    return flatLossAndGradient(this.#variables, () =>
      this.#loss(this.#predictions(this.#forward(rows, true), rows), rows.labels),
    ).then(({ loss, gradient }) => ({ loss, samples: rows.size, gradient }));
  }

  evaluate(batch: Batch): Promise<EvaluationResult> {
    this.#checkAlive();
    return this.#score(this.#check(batch));
  }

  async #score(rows: ModelRows): Promise<EvaluationResult> {
    const names: string[] = [];
    const stacked = tf.tidy(() => {
      const outputs = this.#predictions(this.#forward(rows, false), rows);
      const scalars = {
        // The data's loss alone: the regularization terms train the weights but are no score of
        // them (a perplexity is exp of the cross-entropy, not of the penalty too).
        loss: outputLoss(this.#reading, outputs, rows.labels),
        ...outputMetrics(this.#reading, outputs, rows.labels),
      };
      names.push(...Object.keys(scalars));
      return tf.stack(Object.values(scalars).map((scalar) => tf.cast(scalar, "float32")));
    });
    let values: Float32Array;
    try {
      // One read-back for every figure: a GPU backend syncs once.
      values = (await stacked.data()) as Float32Array;
    } finally {
      stacked.dispose();
    }
    const read = (name: string): number | undefined => {
      const index = names.indexOf(name);
      return index < 0 ? undefined : values[index];
    };
    const loss = read("loss") ?? NaN;
    const predictions = rows.labels.length;
    const correct = read("correct");
    const accuracy = correct === undefined ? NaN : correct / predictions;
    const metrics: Partial<Record<MetricName, number>> = {};
    for (const metric of this.config.metrics) {
      metrics[metric] =
        metric === MetricName.accuracy
          ? accuracy
          : metric === MetricName.perplexity
            ? Math.exp(loss)
            : (read(metric) ?? NaN);
    }
    return { loss, accuracy, predictions, metrics };
  }

  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    this.#model.dispose();
  }

  /** The batch as the model reads it, once it fits: its input values and a label per prediction. */
  #check(batch: Batch): ModelRows {
    const reading = this.#reading;
    if (reading.task === "classification" || reading.task === "regression") {
      const classes = reading.task === "classification" ? reading.classes : undefined;
      const rows = checkTabularBatch(batch, this.uploaded.features, classes);
      return { size: rows.size, input: rows.features, labels: rows.labels };
    }
    const kind = reading.task === "next-token" ? "next-tokens" : "masked-tokens";
    const tokens = checkTokenBatch(batch, kind, reading.vocabulary, this.uploaded.features);
    const cells: number[] = [];
    const labels: number[] = [];
    tokens.labels.forEach((label, cell) => {
      if (label < 0) return;
      cells.push(cell);
      labels.push(label);
    });
    if (cells.length === 0) {
      throw new ModelError(
        ModelErrorCode.MALFORMED_BATCH,
        "the batch has no token to predict (every label is -1)",
      );
    }
    return {
      size: tokens.size,
      input: Float32Array.from(tokens.inputIds),
      labels: Float32Array.from(labels),
      cells: Int32Array.from(cells),
    };
  }

  /** The model's outputs [rows, units] or [rows, positions, vocabulary]; call inside a tidy scope. */
  #forward(rows: ModelRows, training: boolean): tf.Tensor {
    const x = tf.tensor(rows.input, [rows.size, ...this.uploaded.inputShape], "float32");
    return this.#model.apply(x, { training }) as tf.Tensor;
  }

  /**
   * The outputs that are scored, [predictions, units]: a row's, or a language model's at the
   * positions that predict a token (its other positions do not count).
   */
  #predictions(outputs: tf.Tensor, rows: ModelRows): tf.Tensor2D {
    if (rows.cells === undefined) return outputs as tf.Tensor2D;
    const units = outputs.shape[outputs.rank - 1] ?? 0;
    return gatherRows(tf.reshape(outputs, [-1, units]), rows.cells);
  }

  /** The config's loss, plus the regularization terms of the layers that have them (as `fit` adds). */
  #loss(outputs: tf.Tensor2D, labels: Float32Array): tf.Scalar {
    const loss = outputLoss(this.#reading, outputs, labels);
    const regularization = this.#model.calculateLosses();
    return regularization.length === 0 ? loss : tf.add(loss, tf.addN(regularization));
  }

  /**
   * Gives every Dropout layer its own seed derived from the step's. tfjs-layers passes a Dropout
   * layer's configured `seed` to `tf.dropout` on every call, so setting it before the forward pass
   * is what makes the masks reproducible; the field is only read-only in TypeScript.
   */
  #seedDropout(seed: number): void {
    this.#model.layers.forEach((layer, index) => {
      if (layer.getClassName() !== "Dropout") return;
      (layer as unknown as { seed?: number }).seed = deriveSeed(seed, index);
    });
  }

  #checkAlive(): void {
    if (this.#disposed) {
      throw new ModelError(ModelErrorCode.DISPOSED, "the model was disposed; load it again with loadModel");
    }
  }
}

/**
 * The built model takes one input of the manifest's shape and gives one output: [rows, units], or
 * for a language model, which reads [rows, positions] token ids, [rows, positions, vocabulary].
 */
function checkInputAndOutput(
  model: LayersModel,
  inputShape: readonly number[],
  reading: OutputReading,
): void {
  const [input, ...moreInputs] = model.inputs;
  const [output, ...moreOutputs] = model.outputs;
  if (input === undefined || output === undefined || moreInputs.length > 0 || moreOutputs.length > 0) {
    throw invalid(
      `it has ${model.inputs.length} inputs and ${model.outputs.length} outputs; it needs one of each`,
    );
  }
  const builtInput = input.shape.slice(1);
  if (builtInput.length !== inputShape.length || builtInput.some((size, i) => size !== inputShape[i])) {
    throw invalid(
      `TF.js builds its input as [${builtInput.join(", ")}], its model.json says [${inputShape.join(", ")}]`,
    );
  }
  const outputShape = `[${output.shape.map(String).join(", ")}]`;
  if (reading.task === "classification" || reading.task === "regression") {
    if (output.shape.length !== 2) {
      throw invalid(
        `its output has shape ${outputShape}; it must be [batch, units] (flatten or pool before the output layer)`,
      );
    }
    return;
  }
  const [positions] = inputShape;
  if (inputShape.length !== 1 || positions === undefined) {
    throw invalid(
      `a language model reads a sequence of token ids, input shape [positions]; its input is [${inputShape.join(", ")}]`,
    );
  }
  if (output.shape.length !== 3 || output.shape[1] !== positions) {
    throw invalid(
      `its output has shape ${outputShape}; a language model's must be [batch, ${positions}, vocabulary], ` +
        "a prediction at every position (keep the sequence axis: return_sequences on recurrent layers, no Flatten or pooling)",
    );
  }
}

/**
 * A next-token model must predict each position from that position and the ones before it: one
 * that sees a later token (a Conv1D with "same" padding, a backwards recurrent layer) learns to
 * copy the label and scores a perplexity near 1 while being useless. Changes the token at a few
 * positions of one row and checks that the outputs at every earlier position stay the same.
 * Throws MODEL_INVALID naming the first leak.
 */
async function checkReadsOnlyEarlierTokens(
  model: LayersModel,
  positions: number,
  ids: number,
): Promise<void> {
  const changed = [...new Set([1, Math.floor(positions / 2), positions - 1])].filter((at) => at > 0);
  if (changed.length === 0 || ids < 2) return;
  const base = Array.from({ length: positions }, (_, at) => (at * 7 + 3) % ids);
  const input = new Float32Array((changed.length + 1) * positions);
  input.set(base);
  changed.forEach((at, row) => {
    input.set(base, (row + 1) * positions);
    input[(row + 1) * positions + at] = ((base[at] ?? 0) + 1) % ids;
  });
  const outputs = tf.tidy(
    () => model.apply(tf.tensor2d(input, [changed.length + 1, positions]), { training: false }) as tf.Tensor,
  );
  let values: Float32Array;
  try {
    values = (await outputs.data()) as Float32Array;
  } finally {
    outputs.dispose();
  }
  const units = values.length / ((changed.length + 1) * positions);
  changed.forEach((at, row) => {
    for (let position = 0; position < at; position++) {
      for (let unit = 0; unit < units; unit++) {
        const before = values[position * units + unit] ?? 0;
        const after = values[((row + 1) * positions + position) * units + unit] ?? 0;
        if (Math.abs(after - before) > 1e-5 * (1 + Math.abs(before))) {
          throw invalid(
            `its prediction at position ${position} changes with the token at position ${at}, a later one; ` +
              "a next-token model may read only the tokens up to the one it predicts after " +
              '(no Conv1D with "same" padding, no recurrent layer with go_backwards)',
          );
        }
      }
    }
  });
}

/**
 * The built model's variables in the manifest's trainable order, matched by the name the weights
 * were saved under (TF.js renames a variable when another model in the process has its name).
 */
function matchVariables(model: LayersModel, tensors: readonly ModelTensor[]): tf.Variable[] {
  const byName = new Map<string, LayerVariable>(
    model.trainableWeights.map((weight) => [weight.originalName, weight]),
  );
  const variables = tensors.map(({ name, shape }): tf.Variable => {
    const weight = byName.get(name);
    byName.delete(name);
    if (weight === undefined) {
      throw invalid(
        `the manifest's trainable weight ${name} is not a trainable weight of the built model ` +
          `(it has ${model.trainableWeights.map((w) => w.originalName).join(", ")})`,
      );
    }
    if (weight.shape.length !== shape.length || weight.shape.some((size, i) => size !== shape[i])) {
      throw invalid(
        `weight ${name} is [${shape.join(", ")}] in the manifest but [${weight.shape.join(", ")}] in the model`,
      );
    }
    const variable = weight.read();
    if (!isVariable(variable)) throw invalid(`weight ${name} is not backed by a TF.js variable`);
    return variable;
  });
  if (byName.size > 0) {
    throw invalid(
      `the built model trains ${[...byName.keys()].join(", ")}, which the manifest does not list as trainable`,
    );
  }
  return variables;
}

/**
 * A batch as the model reads it: `size` rows of input values filling its input shape, and a label
 * per prediction. A language model predicts only at some positions: `cells` are their flat indices
 * (row · sequence length + position) in its outputs, in the order of `labels`.
 */
interface ModelRows {
  readonly size: number;
  readonly input: Float32Array;
  readonly labels: Float32Array;
  readonly cells?: Int32Array;
}

function isVariable(tensor: tf.Tensor): tensor is tf.Variable {
  return tensor instanceof tf.Variable;
}

function shapeOf(model: LayersModel): UploadedModelShape {
  const input = model.inputs[0]?.shape.slice(1) ?? [];
  const inputShape = input.map((size) => size ?? 1);
  let activationFloats = 0;
  for (const layer of model.layers) {
    const shapes = layer.outputShape;
    // A layer with several outputs reports a list of shapes; one output, a shape.
    const list = Array.isArray(shapes[0]) ? (shapes as (number | null)[][]) : [shapes as (number | null)[]];
    for (const shape of list)
      activationFloats += shape.slice(1).reduce<number>((product, size) => product * (size ?? 1), 1);
  }
  const embeddings = model.layers
    .filter((layer) => layer.getClassName() === "Embedding")
    .map((layer) => (layer.getConfig() as { inputDim?: unknown }).inputDim)
    .filter((inputDim): inputDim is number => typeof inputDim === "number");
  return {
    inputShape,
    features: inputShape.reduce((product, size) => product * size, 1),
    outputUnits: model.outputs[0]?.shape.at(-1) ?? 0,
    activationFloats,
    ...(embeddings.length === 0 ? {} : { tokenIds: Math.min(...embeddings) }),
  };
}

function invalid(what: string, cause?: unknown): ModelError {
  return new ModelError(
    ModelErrorCode.MODEL_INVALID,
    `the uploaded model cannot be trained: ${what}`,
    cause === undefined ? undefined : { cause },
  );
}
