import { createHash } from "node:crypto";
import {
  elementCount,
  layersModelJsonBytes,
  MNIST_DIGIT_CLASSES,
  MNIST_IMAGE_PIXELS,
  BuiltInModel,
  type ModelConfig,
  type ModelTensor,
} from "@barnraise/protocol";
import { AppError, AppErrorCode } from "../app-error.ts";
import type { AppContext } from "../context.ts";
import { etagListMatches, readObject, selectRange } from "../http/byte-range.ts";
import { errorResponse } from "../http/route.ts";
import { storedModelFileKey } from "../models/model-store.ts";
import type { ObjectStore } from "../storage/object-store.ts";
import { readCheckpointParameters, type CheckpointParameters } from "./read-checkpoint-safetensors.ts";

/**
 * A checkpoint as a TensorFlow.js Layers model: `…/tfjs/model.json` (topology and a weights manifest
 * of one group) and `…/tfjs/weights.bin` beside it, so `tf.loadLayersModel("…/tfjs/model.json")`
 * loads the checkpoint's weights into a model ready for `predict`.
 *
 * - An uploaded model ("uploaded"): its stored topology, and every weight of its stored manifest in
 *   manifest order; the trainable ones come from the checkpoint's flat vector, the frozen ones
 *   (which checkpoints do not hold) from the uploaded weights.
 * - mnist-mlp: Dense layers named as the swarm names them (`hidden0`, …, `output`; weights
 *   `hidden0/kernel`, `hidden0/bias`, …), the config's activation on the hidden layers and a linear
 *   output: it predicts logits, like the peers' model (no softmax). See `mnistMlpTopology`.
 * - albert-mlm: no TF.js Layers equivalent (shared layers, tied output projection); CONFLICT.
 *
 * weights.bin is never held in memory: it is a list of byte ranges of the checkpoint object and the
 * stored weights object, streamed on request (with single-range support).
 */

/** The name model.json gives its weights: fetched relative to model.json's URL. */
export const TFJS_WEIGHTS_FILE = "weights.bin";

/** Bytes `start…start + length − 1` of the object `key` of the store. */
export interface ObjectSegment {
  readonly key: string;
  readonly start: number;
  readonly length: number;
}

export interface TfjsExport {
  readonly modelJson: Uint8Array;
  /** weights.bin: these segments, concatenated. */
  readonly weights: readonly ObjectSegment[];
  /** Where the segments' objects are. */
  readonly storage: ObjectStore;
  readonly weightsBytes: number;
  /** Entity tags (unquoted) of model.json and weights.bin. */
  readonly modelEtag: string;
  readonly weightsEtag: string;
}

/** Refuses a model whose weights have no TF.js Layers form. */
function acceptTfjs(model: ModelConfig): void {
  if (model.kind === BuiltInModel.albertMlm) {
    throw new AppError(
      AppErrorCode.CONFLICT,
      "the ALBERT preset (albert-mlm) has no TF.js Layers equivalent; use the checkpoint's safetensors export instead",
    );
  }
}

/** Whether checkpoints of an experiment with this model have a TF.js export. */
export function hasTfjsExport(model: { readonly kind: string }): boolean {
  return model.kind !== BuiltInModel.albertMlm;
}

/**
 * A checkpoint as a TF.js Layers model: NOT_FOUND for an unknown checkpoint (or a file gone),
 * CONFLICT for an ALBERT run, or a checkpoint that does not hold the experiment's model.
 */
export async function readCheckpointTfjs(
  ctx: AppContext,
  experimentId: string,
  checkpointId: string,
): Promise<TfjsExport> {
  const parameters = await readCheckpointParameters(ctx, experimentId, checkpointId, acceptTfjs);
  const { modelJson, weights } =
    parameters.stored === null ? presetExport(parameters) : await layersExport(ctx.storage, parameters);
  const weightsBytes = weights.reduce((sum, segment) => sum + segment.length, 0);
  // The checkpoint names the numbers; the rest (topology, layout, frozen weights) follows from the
  // model, pinned here too, so a later change of the export's form is never served from a cache.
  const variant = createHash("sha256")
    .update(modelJson)
    .update(JSON.stringify(parameters.model))
    .digest("hex")
    .slice(0, 16);
  const etag = `${parameters.checkpoint.sha256}-tfjs-${variant}`;
  return {
    modelJson,
    weights,
    storage: ctx.storage,
    weightsBytes,
    modelEtag: `${etag}-model`,
    weightsEtag: `${etag}-weights`,
  };
}

function presetExport(parameters: CheckpointParameters): { modelJson: Uint8Array; weights: ObjectSegment[] } {
  const { model } = parameters;
  if (model.kind !== BuiltInModel.mnistMlp) throw new Error(`no TF.js export for ${model.kind}`);
  const tensors = parameters.tensors.map(({ name, shape }) => ({ name: tfjsWeightName(name), shape }));
  const modelJson = layersModelJsonBytes(
    { generatedBy: "Barnraise", convertedBy: null, modelTopology: mnistMlpTopology(model) },
    TFJS_WEIGHTS_FILE,
    tensors,
  );
  // The flat vector is the manifest's weights in order: one slice of the checkpoint.
  return {
    modelJson,
    weights: [{ key: parameters.key, start: parameters.start, length: parameters.parameterBytes }],
  };
}

/** `hidden0.kernel` → `hidden0/kernel`: TF.js names a layer's weights `<layer>/<weight>`. */
function tfjsWeightName(name: string): string {
  const dot = name.lastIndexOf(".");
  return `${name.slice(0, dot)}/${name.slice(dot + 1)}`;
}

type MnistMlpConfig = Extract<ModelConfig, { kind: typeof BuiltInModel.mnistMlp }>;

/**
 * The Keras topology of an mnist-mlp: Dense layers `hidden0`, …, `output` (linear: logits) on a
 * [null, 784] input, as a Sequential with the activation on each hidden Dense for relu and tanh.
 *
 * GELU: the peers' is the tanh approximation, ½x(1 + tanh(√(2/π)(x + 0.044715x³))). TF.js Layers
 * has it as the activation `gelu_new`, but cannot load that name from a model.json (it camel-cases
 * the name to `geluNew` and finds no such class; its `gelu` is the exact, erf form, which differs by
 * up to 5e-4). So a GELU model is a functional model that spells the formula out with standard,
 * weightless layers after each linear hidden Dense (Multiply, Rescaling, Add, Activation): TF.js
 * loads it as it is, and it computes what the peers compute.
 */
export function mnistMlpTopology(model: MnistMlpConfig): Record<string, unknown> {
  const dense = (name: string, units: number, activation: string, first: boolean) => ({
    class_name: "Dense",
    config: {
      name,
      trainable: true,
      dtype: "float32",
      ...(first ? { batch_input_shape: [null, MNIST_IMAGE_PIXELS] } : {}),
      units,
      activation,
      use_bias: true,
      kernel_initializer: { class_name: "GlorotUniform", config: { seed: null } },
      bias_initializer: { class_name: "Zeros", config: {} },
      kernel_regularizer: null,
      bias_regularizer: null,
      activity_regularizer: null,
      kernel_constraint: null,
      bias_constraint: null,
    },
  });
  const name = "barnraise_mnist_mlp";
  if (model.activation !== "gelu") {
    const layers = [
      ...model.hiddenUnits.map((units, i) => dense(`hidden${i}`, units, model.activation, i === 0)),
      dense("output", MNIST_DIGIT_CLASSES, "linear", false),
    ];
    return { class_name: "Sequential", config: { name, layers }, backend: "tensor_flow.js" };
  }

  const layers: Record<string, unknown>[] = [
    {
      name: "input",
      class_name: "InputLayer",
      config: {
        name: "input",
        batch_input_shape: [null, MNIST_IMAGE_PIXELS],
        dtype: "float32",
        sparse: false,
      },
      inbound_nodes: [],
    },
  ];
  /** Adds a layer called on the outputs of `inputs` (layer names); returns its name. */
  const add = (
    layer: { class_name: string; config: Record<string, unknown> },
    inputs: readonly string[],
  ): string => {
    const layerName = String(layer.config.name);
    layers.push({ ...layer, name: layerName, inbound_nodes: [inputs.map((input) => [input, 0, 0, {}])] });
    return layerName;
  };
  const weightless = (className: string, layerName: string, config: Record<string, unknown> = {}) => ({
    class_name: className,
    config: { name: layerName, trainable: true, dtype: "float32", ...config },
  });
  const rescaling = (layerName: string, scale: number, offset = 0) =>
    weightless("Rescaling", layerName, { scale, offset });
  let previous = "input";
  model.hiddenUnits.forEach((units, i) => {
    const x = add(dense(`hidden${i}`, units, "linear", false), [previous]);
    // No layer takes the same tensor twice: TF.js's executor would dispose it too early.
    const scaled = add(rescaling(`${x}_gelu_scaled`, 0.044715), [x]);
    const square = add(weightless("Multiply", `${x}_gelu_square`), [x, scaled]);
    const cubic = add(weightless("Multiply", `${x}_gelu_cubic`), [x, square]);
    const sum = add(weightless("Add", `${x}_gelu_sum`), [x, cubic]);
    const inner = add(rescaling(`${x}_gelu_inner`, Math.sqrt(2 / Math.PI)), [sum]);
    const tanh = add(weightless("Activation", `${x}_gelu_tanh`, { activation: "tanh" }), [inner]);
    const gate = add(rescaling(`${x}_gelu_gate`, 0.5, 0.5), [tanh]);
    previous = add(weightless("Multiply", `${x}_gelu`), [x, gate]);
  });
  add(dense("output", MNIST_DIGIT_CLASSES, "linear", false), [previous]);
  return {
    class_name: "Model",
    config: { name, layers, input_layers: [["input", 0, 0]], output_layers: [["output", 0, 0]] },
    backend: "tensor_flow.js",
  };
}

async function layersExport(
  storage: ObjectStore,
  parameters: CheckpointParameters,
): Promise<{ modelJson: Uint8Array; weights: ObjectSegment[] }> {
  const stored = parameters.stored;
  if (stored === null) throw new Error("layersExport needs the stored model");
  const storedWeights = storedModelFileKey(stored.sha256, stored.weightsFile);
  const storedBytes = (await storage.head(storedWeights))?.size;
  if (storedBytes === undefined) {
    throw new AppError(AppErrorCode.NOT_FOUND, `the weights of model ${stored.sha256} are not available`);
  }
  if (storedBytes !== stored.model.weightBytes) {
    throw new Error(
      `the stored weights of model ${stored.sha256} are ${storedBytes} bytes, not ${stored.model.weightBytes}`,
    );
  }
  const weights: ObjectSegment[] = [];
  const push = (segment: ObjectSegment): void => {
    const last = weights.at(-1);
    if (last !== undefined && last.key === segment.key && last.start + last.length === segment.start) {
      weights[weights.length - 1] = { ...last, length: last.length + segment.length };
    } else if (segment.length > 0) {
      weights.push(segment);
    }
  };
  let flat = parameters.start;
  for (const weight of stored.model.weights) {
    const length = elementCount(weight.shape) * 4;
    if (weight.trainable) {
      push({ key: parameters.key, start: flat, length });
      flat += length;
    } else {
      push({ key: storedWeights, start: weight.byteOffset, length });
    }
  }
  const manifest: ModelTensor[] = stored.model.weights.map(({ name, shape }) => ({ name, shape }));
  return { modelJson: layersModelJsonBytes(stored.model, TFJS_WEIGHTS_FILE, manifest), weights };
}

/** Public, immutable, and loadable by `tf.loadLayersModel` from a page of any origin. */
const EXPORT_HEADERS = {
  "cache-control": "public, max-age=31536000, immutable",
  "access-control-allow-origin": "*",
} as const;

/** model.json: 200 with the bytes, or 304 when `If-None-Match` names its ETag. */
export function tfjsModelJsonResponse(req: Request, exported: TfjsExport): Response {
  const etag = `"${exported.modelEtag}"`;
  const headers: Record<string, string> = { ...EXPORT_HEADERS, etag };
  if (etagListMatches(req.headers.get("if-none-match"), etag))
    return new Response(null, { status: 304, headers });
  headers["content-type"] = "application/json";
  headers["content-length"] = String(exported.modelJson.byteLength);
  // Encoded text: its buffer is an ArrayBuffer.
  const body = exported.modelJson as Uint8Array<ArrayBuffer>;
  return new Response(req.method === "HEAD" ? null : body, { status: 200, headers });
}

/**
 * weights.bin, streamed from its segments, with what `objectResponse` gives a file: ETag, 304 on
 * `If-None-Match`, one `Range` (206, or 416 beyond the end), `If-Range`, HEAD. The first segment is
 * opened and the others are looked up before the response is built, so an object that is gone is
 * NOT_FOUND and not a broken stream.
 */
export async function tfjsWeightsResponse(req: Request, exported: TfjsExport): Promise<Response> {
  const size = exported.weightsBytes;
  const etag = `"${exported.weightsEtag}"`;
  const headers: Record<string, string> = { ...EXPORT_HEADERS, etag, "accept-ranges": "bytes" };
  if (etagListMatches(req.headers.get("if-none-match"), etag))
    return new Response(null, { status: 304, headers });
  const range = selectRange(req, size, etag);
  if (range === "unsatisfiable") {
    return errorResponse(
      new AppError(
        AppErrorCode.RANGE_NOT_SATISFIABLE,
        `the requested range is not within the file's ${size} bytes`,
        {
          headers: { "content-range": `bytes */${size}`, "accept-ranges": "bytes" },
        },
      ),
    );
  }
  const start = range?.start ?? 0;
  const end = range?.end ?? size - 1;
  headers["content-type"] = "application/octet-stream";
  headers["content-length"] = String(end - start + 1);
  if (range !== undefined) headers["content-range"] = `bytes ${start}-${end}/${size}`;
  const status = range !== undefined ? 206 : 200;
  if (req.method === "HEAD" || end < start) return new Response(null, { status, headers });
  const body = await segmentStream(exported.storage, exported.weights, start, end);
  return new Response(body, { status, headers });
}

/** The parts of the segments that bytes `start…end` (inclusive) of their concatenation cover. */
function coveredSpans(segments: readonly ObjectSegment[], start: number, end: number): ObjectSegment[] {
  const spans: ObjectSegment[] = [];
  let offset = 0;
  for (const segment of segments) {
    const from = Math.max(start, offset);
    const to = Math.min(end + 1, offset + segment.length);
    if (from < to) spans.push({ key: segment.key, start: segment.start + from - offset, length: to - from });
    offset += segment.length;
  }
  return spans;
}

/**
 * Bytes `start…end` (inclusive) of the concatenated segments as a web stream: one ranged read of
 * the store per segment, each opened when the one before ends. Every object is looked up first.
 */
async function segmentStream(
  storage: ObjectStore,
  segments: readonly ObjectSegment[],
  start: number,
  end: number,
): Promise<ReadableStream<Uint8Array>> {
  const spans = coveredSpans(segments, start, end);
  for (const key of new Set(spans.map((span) => span.key))) {
    if ((await storage.head(key)) === null) {
      throw new AppError(AppErrorCode.NOT_FOUND, "the file is not available");
    }
  }
  const open = (span: ObjectSegment) =>
    readObject(storage, span.key, { start: span.start, end: span.start + span.length - 1 }).then((stream) =>
      stream.getReader(),
    );
  let index = 0;
  const first = spans[0];
  let reader = first === undefined ? undefined : await open(first);
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        try {
          while (reader !== undefined) {
            const next = await reader.read();
            if (!next.done) {
              controller.enqueue(next.value);
              return;
            }
            index += 1;
            const span = spans[index];
            reader = span === undefined ? undefined : await open(span);
          }
          controller.close();
        } catch (error) {
          controller.error(error);
        }
      },
      async cancel(reason) {
        await reader?.cancel(reason);
      },
    },
    { highWaterMark: 1 },
  );
}
