import { elementCount, type ModelTensor } from "./model-tensors.ts";

/**
 * Organizers' own models in TensorFlow.js's Layers format: a `model.json` (topology and weights
 * manifest) and binary weight shards, as `tf.LayersModel.save()` and `tensorflowjs_converter`
 * write them. The platform checks an upload with `parseLayersModelJson` and `checkLayersWeightFiles`
 * before it stores it; the peer runs the same checks on what it downloads. Both work on the JSON
 * alone (no TF.js), so the platform needs no tensor library.
 *
 * Stored form. The platform concatenates the shards in manifest order into one file and rewrites
 * the manifest to one group that names it `weights-<sha256 of that file>.bin`; the result
 * (`canonicalLayersModelJson`) is the model's `model.json`, and the SHA-256 of its bytes is the
 * model's id, which the signed config carries. Since model.json names its weights by hash, the one
 * id pins both files, and `tf.loadLayersModel` opens the stored pair as it is.
 */

/** Limits of an uploaded model. */
export const LAYERS_MODEL_LIMITS = {
  /** model.json itself. */
  modelJsonBytes: 8 << 20,
  /** All weight shards together. */
  weightBytes: 256 << 20,
  /** Trainable parameters: every peer holds them, their gradients and optimizer state. */
  parameters: 32_000_000,
} as const;

/**
 * Layer classes a swarm can train: their weights are all trainable and averaged, and their forward
 * pass is differentiable in TF.js. BatchNormalization is out on purpose: its moving statistics are
 * weights that no gradient updates and the swarm does not average.
 */
export const SUPPORTED_LAYER_CLASSES: readonly string[] = [
  "InputLayer",
  "Dense",
  "Dropout",
  "Activation",
  "Flatten",
  "Reshape",
  "Permute",
  "RepeatVector",
  "Conv1D",
  "Conv2D",
  "DepthwiseConv2D",
  "SeparableConv2D",
  "MaxPooling1D",
  "MaxPooling2D",
  "AveragePooling1D",
  "AveragePooling2D",
  "GlobalAveragePooling1D",
  "GlobalAveragePooling2D",
  "GlobalMaxPooling1D",
  "GlobalMaxPooling2D",
  "ZeroPadding2D",
  "UpSampling2D",
  "Embedding",
  "LayerNormalization",
  "SimpleRNN",
  "GRU",
  "LSTM",
  "Add",
  "Concatenate",
  "Multiply",
  "Average",
];

/** Layers that pass their input's width through to the next layer (walked past to find the output). */
const PASS_THROUGH = new Set(["Dropout", "Activation", "ActivityRegularization", "GaussianNoise"]);

/** Which upload a problem is in, and what is wrong; the form shows `message` under the file. */
export class LayersModelError extends Error {
  override readonly name = "LayersModelError";
  /** `model.json`, or the weights file the problem is in. */
  readonly file: string;

  constructor(file: string, message: string) {
    super(`${file}: ${message}`);
    this.file = file;
  }
}

/** One weight of the manifest, where it lies in the concatenated weights, and whether it trains. */
export interface LayersModelWeight extends ModelTensor {
  /** Byte offset in the concatenation of all shards, in manifest order. */
  readonly byteOffset: number;
  readonly trainable: boolean;
}

/** One group of the weights manifest. */
export interface WeightGroup {
  readonly paths: readonly string[];
  readonly bytes: number;
}

/** A model.json that passed every check that needs no weights. */
export interface LayersModelJson {
  readonly format: string;
  readonly generatedBy: string | null;
  readonly convertedBy: string | null;
  readonly modelTopology: Record<string, unknown>;
  /** The manifest's groups: their shard files, in order, and the bytes those hold together. */
  readonly groups: readonly WeightGroup[];
  readonly weights: readonly LayersModelWeight[];
  /** The single input's shape without the batch dimension, e.g. [4] or [28, 28, 1]. */
  readonly inputShape: readonly number[];
  /** Width of the output layer (a Dense layer's units). */
  readonly outputUnits: number;
  /** The output's activation: "softmax", "linear", "sigmoid", … */
  readonly outputActivation: string;
  /** Elements of the trainable weights: the length of the flat vector the swarm averages. */
  readonly parameters: number;
  /** Bytes of all weights together. */
  readonly weightBytes: number;
}

const MODEL_JSON = "model.json";

type Json = Record<string, unknown>;

function isObject(value: unknown): value is Json {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function fail(message: string): never {
  throw new LayersModelError(MODEL_JSON, message);
}

/**
 * Parses and checks a model.json: valid JSON within the size limit, a Layers topology (Sequential
 * or a functional model with one input and one output) made only of supported layers, a float32
 * weights manifest within the parameter limit, an input shape, and a Dense output layer. Throws
 * LayersModelError naming the problem.
 */
export function parseLayersModelJson(bytes: Uint8Array): LayersModelJson {
  if (bytes.byteLength > LAYERS_MODEL_LIMITS.modelJsonBytes) {
    fail(`is ${bytes.byteLength} bytes; the limit is ${LAYERS_MODEL_LIMITS.modelJsonBytes} bytes`);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes));
  } catch (error) {
    fail(`is not valid JSON (${error instanceof Error ? error.message : String(error)})`);
  }
  if (!isObject(parsed)) fail("is not a JSON object");
  const format = parsed.format ?? "layers-model";
  if (format !== "layers-model") {
    fail(`has format ${JSON.stringify(format)}; only TF.js Layers models ("layers-model") can be trained`);
  }
  const topology = parsed.modelTopology;
  if (!isObject(topology)) fail("has no modelTopology object; save the model with tf.LayersModel.save()");
  // tensorflowjs_converter nests the Keras model config under model_config.
  const model = isObject(topology.model_config) ? topology.model_config : topology;
  const layers = topologyLayers(model);
  const byName = new Map<string, Json>();
  layers.forEach((layer, index) => {
    const className = layer.class_name;
    const config = isObject(layer.config) ? layer.config : {};
    const name =
      typeof config.name === "string" ? config.name : typeof layer.name === "string" ? layer.name : "";
    if (typeof className !== "string" || !SUPPORTED_LAYER_CLASSES.includes(className)) {
      fail(
        `layer ${index} (${name || "unnamed"}) is a ${String(className)}, which Barnraise cannot train; ` +
          `supported layers: ${SUPPORTED_LAYER_CLASSES.join(", ")}`,
      );
    }
    if (name !== "") byName.set(name, layer);
  });
  const weights = manifestWeights(parsed.weightsManifest, byName);
  const parameters = weights.reduce((sum, w) => sum + (w.trainable ? elementCount(w.shape) : 0), 0);
  if (parameters > LAYERS_MODEL_LIMITS.parameters) {
    fail(`has ${parameters} trainable parameters; the limit is ${LAYERS_MODEL_LIMITS.parameters}`);
  }
  if (parameters === 0) fail("has no trainable weights");
  const weightBytes = weights.reduce((sum, w) => sum + elementCount(w.shape) * 4, 0);
  if (weightBytes > LAYERS_MODEL_LIMITS.weightBytes) {
    fail(`needs ${weightBytes} bytes of weights; the limit is ${LAYERS_MODEL_LIMITS.weightBytes}`);
  }
  const groups = weightGroups(parsed.weightsManifest, weights);
  const output = outputLayer(model, layers, byName);
  return {
    format: "layers-model",
    generatedBy: typeof parsed.generatedBy === "string" ? parsed.generatedBy : null,
    convertedBy: typeof parsed.convertedBy === "string" ? parsed.convertedBy : null,
    modelTopology: topology,
    groups,
    weights,
    inputShape: inputShape(model, layers, byName),
    outputUnits: output.units,
    outputActivation: output.activation,
    parameters,
    weightBytes,
  };
}

function topologyLayers(model: Json): Json[] {
  const className = model.class_name;
  if (className !== "Sequential" && className !== "Model" && className !== "Functional") {
    fail(`the topology is a ${String(className)}; expected a Sequential or functional (Model) Keras model`);
  }
  const config = model.config;
  // Old Keras wrote a Sequential's config as the list of layers itself.
  const layers = Array.isArray(config) ? config : isObject(config) ? config.layers : undefined;
  if (!Array.isArray(layers) || layers.length === 0) fail("the topology lists no layers");
  if (!layers.every(isObject)) fail("a layer of the topology is not an object");
  return layers;
}

function manifestWeights(manifest: unknown, byName: ReadonlyMap<string, Json>): LayersModelWeight[] {
  if (!Array.isArray(manifest) || manifest.length === 0) {
    fail("has no weightsManifest; save the model with its weights");
  }
  const weights: LayersModelWeight[] = [];
  const seen = new Set<string>();
  let byteOffset = 0;
  manifest.forEach((group, groupIndex) => {
    if (!isObject(group) || !Array.isArray(group.paths) || !Array.isArray(group.weights)) {
      fail(`weightsManifest[${groupIndex}] needs "paths" and "weights" arrays`);
    }
    for (const spec of group.weights as unknown[]) {
      if (!isObject(spec) || typeof spec.name !== "string" || !Array.isArray(spec.shape)) {
        fail(`weightsManifest[${groupIndex}] has a weight without a name and shape`);
      }
      const { name, shape } = spec;
      if (!shape.every((size) => Number.isSafeInteger(size) && (size as number) >= 0)) {
        fail(`weight ${name} has shape ${JSON.stringify(shape)}; sizes must be whole numbers`);
      }
      if ((spec.dtype ?? "float32") !== "float32") {
        fail(`weight ${name} is ${String(spec.dtype)}; only float32 weights can be trained`);
      }
      if (spec.quantization !== undefined) {
        fail(`weight ${name} is quantized; convert the model without quantization to train it`);
      }
      if (seen.has(name)) fail(`weight ${name} appears twice in the manifest`);
      seen.add(name);
      const dims = shape as number[];
      const layer = byName.get(name.split("/")[0] ?? "");
      const layerConfig = layer !== undefined && isObject(layer.config) ? layer.config : {};
      weights.push({ name, shape: dims, byteOffset, trainable: layerConfig.trainable !== false });
      byteOffset += elementCount(dims) * 4;
    }
  });
  return weights;
}

/**
 * Each group's shard files and the bytes they must hold together: TF.js concatenates a group's
 * weights and cuts the result into its paths (4 MB each by default, the last one shorter).
 */
function weightGroups(manifest: unknown, weights: readonly LayersModelWeight[]): WeightGroup[] {
  const groups: WeightGroup[] = [];
  let index = 0;
  for (const group of manifest as Json[]) {
    const count = (group.weights as unknown[]).length;
    const bytes = weights.slice(index, index + count).reduce((sum, w) => sum + elementCount(w.shape) * 4, 0);
    index += count;
    const paths = (group.paths as unknown[]).map((path) => {
      const name = typeof path === "string" ? path.split("/").pop() : undefined;
      if (name === undefined || !/^[\w.-]{1,200}$/.test(name) || name === MODEL_JSON) {
        fail(`weights path ${JSON.stringify(path)} is not a plain file name`);
      }
      return name;
    });
    if (paths.length === 0) fail("a weightsManifest group lists no paths");
    groups.push({ paths, bytes });
  }
  return groups;
}

/**
 * Checks the uploaded weight files (name → size) against a parsed model.json: every path the
 * manifest names is there, each group's files together hold exactly the bytes its weights need
 * (float32), and no other file came along. Returns the file names in manifest order, to be
 * concatenated. Throws LayersModelError naming the file.
 */
export function checkLayersWeightFiles(model: LayersModelJson, files: ReadonlyMap<string, number>): string[] {
  const order: string[] = [];
  for (const group of model.groups) {
    for (const path of group.paths) {
      if (!files.has(path)) {
        throw new LayersModelError(path, "is named by model.json's weightsManifest but was not uploaded");
      }
      order.push(path);
    }
    const actual = group.paths.reduce((sum, path) => sum + (files.get(path) ?? 0), 0);
    if (actual !== group.bytes) {
      throw new LayersModelError(
        group.paths.at(-1) ?? MODEL_JSON,
        `${group.paths.join(", ")} ${group.paths.length === 1 ? "holds" : "hold"} ${actual} bytes, ` +
          `but the weights the manifest lists for ${group.paths.length === 1 ? "it" : "them"} need ${group.bytes} (float32)`,
      );
    }
  }
  for (const file of files.keys()) {
    if (file !== MODEL_JSON && !order.includes(file)) {
      throw new LayersModelError(file, "is not named by model.json's weightsManifest");
    }
  }
  return order;
}

/** The file name a stored model gives its concatenated weights. */
export function layersWeightsFileName(weightsSha256: string): string {
  return `weights-${weightsSha256}.bin`;
}

/** Matches a stored model's weights file name and captures its SHA-256. */
export const LAYERS_WEIGHTS_FILE = /^weights-([0-9a-f]{64})\.bin$/;

/**
 * The stored model.json of a checked model whose weights, concatenated in manifest order, have
 * SHA-256 `weightsSha256`: the same topology and weights in one group with one path that names the
 * weights by hash. The SHA-256 of these bytes is the model's id.
 */
export function canonicalLayersModelJson(model: LayersModelJson, weightsSha256: string): Uint8Array {
  return layersModelJsonBytes(
    model,
    layersWeightsFileName(weightsSha256),
    model.weights.map(({ name, shape }) => ({ name, shape })),
  );
}

/** A model.json for `model`'s topology with one weights group: `weights` in `path`, float32. */
export function layersModelJsonBytes(
  model: Pick<LayersModelJson, "generatedBy" | "convertedBy" | "modelTopology">,
  path: string,
  weights: readonly ModelTensor[],
): Uint8Array {
  const json = {
    format: "layers-model",
    generatedBy: model.generatedBy,
    convertedBy: model.convertedBy,
    modelTopology: model.modelTopology,
    weightsManifest: [
      {
        paths: [path],
        weights: weights.map(({ name, shape }) => ({ name, shape: [...shape], dtype: "float32" })),
      },
    ],
  };
  return new TextEncoder().encode(JSON.stringify(json));
}

/** The trainable weights, in manifest order: the named tensors of the flat vector the swarm averages. */
export function layersModelTensors(model: LayersModelJson): ModelTensor[] {
  return model.weights.filter((w) => w.trainable).map(({ name, shape }) => ({ name, shape }));
}

/** One layer of a topology as model.json lists it. */
export interface LayersModelLayer {
  readonly className: string;
  readonly config: Readonly<Record<string, unknown>>;
}

/**
 * The layers of a checked model's topology, in the order model.json lists them (for a Sequential
 * model, the order data flows through them): what a check of the architecture reads, such as a
 * language model's Embedding size or a layer that drops the sequence axis.
 */
export function layersModelLayers(model: Pick<LayersModelJson, "modelTopology">): LayersModelLayer[] {
  const topology = model.modelTopology;
  const inner = isObject(topology.model_config) ? topology.model_config : topology;
  return topologyLayers(inner).map((layer) => ({
    className: String(layer.class_name),
    config: layerConfig(layer),
  }));
}

function layerConfig(layer: Json | undefined): Json {
  return layer !== undefined && isObject(layer.config) ? layer.config : {};
}

function batchShape(config: Json): unknown {
  return config.batch_input_shape ?? config.batch_shape;
}

function inputShape(model: Json, layers: readonly Json[], byName: ReadonlyMap<string, Json>): number[] {
  let shape: unknown;
  if (model.class_name === "Sequential") {
    shape = batchShape(layerConfig(layers[0]));
  } else {
    const inputs = layerConfig(model).input_layers;
    if (!Array.isArray(inputs) || inputs.length !== 1) fail("the model must have exactly one input");
    const input: unknown = inputs[0];
    const name: unknown = Array.isArray(input) ? input[0] : undefined;
    shape = batchShape(layerConfig(byName.get(String(name))));
  }
  if (
    !Array.isArray(shape) ||
    shape.length < 2 ||
    !shape.slice(1).every((size) => Number.isSafeInteger(size) && (size as number) > 0)
  ) {
    fail("the first layer has no input shape with fixed sizes (batch_input_shape [null, …])");
  }
  return shape.slice(1) as number[];
}

function outputLayer(
  model: Json,
  layers: readonly Json[],
  byName: ReadonlyMap<string, Json>,
): { units: number; activation: string } {
  let layer: Json | undefined;
  let next: () => Json | undefined;
  if (model.class_name === "Sequential") {
    let index = layers.length - 1;
    layer = layers[index];
    next = () => layers[--index];
  } else {
    const outputs = layerConfig(model).output_layers;
    if (!Array.isArray(outputs) || outputs.length !== 1) fail("the model must have exactly one output");
    layer = byName.get(String(Array.isArray(outputs[0]) ? outputs[0][0] : undefined));
    next = () => {
      // The first inbound layer of a pass-through layer's first call.
      const nodes: unknown = layer?.inbound_nodes;
      const call: unknown = Array.isArray(nodes) ? nodes[0] : undefined;
      const first: unknown = Array.isArray(call) ? call[0] : undefined;
      const name: unknown = Array.isArray(first) ? first[0] : isObject(first) ? first.name : undefined;
      return byName.get(String(name));
    };
  }
  let activation: string | undefined;
  while (layer !== undefined && PASS_THROUGH.has(String(layer.class_name))) {
    const config = layerConfig(layer);
    if (layer.class_name === "Activation" && activation === undefined) activation = String(config.activation);
    layer = next();
  }
  const config = layerConfig(layer);
  if (layer?.class_name !== "Dense" || !Number.isSafeInteger(config.units)) {
    fail(
      `the output layer is a ${String(layer?.class_name)}; it must be Dense (with Dropout or Activation after it), ` +
        "so its width can be checked against the dataset",
    );
  }
  return {
    units: config.units as number,
    activation: activation ?? (typeof config.activation === "string" ? config.activation : "linear"),
  };
}
