import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import {
  canonicalLayersModelJson,
  checkLayersWeightFiles,
  LAYERS_MODEL_LIMITS,
  LAYERS_WEIGHTS_FILE,
  LayersModelError,
  layersModelTensors,
  parseLayersModelJson,
  safeParseExperimentConfig,
} from "../src/index.ts";

/** A Sequential 4 → 8 (relu) → dropout → 3 (softmax) model.json, as tf.LayersModel.save() writes it. */
function modelJson(overrides: { layers?: unknown[]; manifest?: unknown; topology?: unknown } = {}) {
  const dense = (name: string, units: number, activation: string, extra: object = {}) => ({
    class_name: "Dense",
    config: { units, activation, use_bias: true, name, trainable: true, ...extra },
  });
  const layers = overrides.layers ?? [
    dense("dense_Dense1", 8, "relu", { batch_input_shape: [null, 4], dtype: "float32" }),
    { class_name: "Dropout", config: { rate: 0.1, name: "dropout_Dropout1", trainable: true } },
    dense("dense_Dense2", 3, "softmax"),
  ];
  return {
    format: "layers-model",
    generatedBy: "TensorFlow.js tfjs-layers v4.22.0",
    convertedBy: null,
    modelTopology: overrides.topology ?? {
      class_name: "Sequential",
      config: { name: "sequential_1", layers },
      keras_version: "tfjs-layers 4.22.0",
      backend: "tensor_flow.js",
    },
    weightsManifest: overrides.manifest ?? [
      {
        paths: ["./weights.bin"],
        weights: [
          { name: "dense_Dense1/kernel", shape: [4, 8], dtype: "float32" },
          { name: "dense_Dense1/bias", shape: [8], dtype: "float32" },
          { name: "dense_Dense2/kernel", shape: [8, 3], dtype: "float32" },
          { name: "dense_Dense2/bias", shape: [3], dtype: "float32" },
        ],
      },
    ],
  };
}

const WEIGHT_BYTES = (32 + 8 + 24 + 3) * 4;

function bytes(value: unknown): Uint8Array {
  return new TextEncoder().encode(typeof value === "string" ? value : JSON.stringify(value));
}

function refusal(run: () => unknown): LayersModelError {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(LayersModelError);
    return error as LayersModelError;
  }
  throw new Error("expected a LayersModelError");
}

describe("parseLayersModelJson", () => {
  it("reads the input shape, the output, the weights and the parameter count of a saved model", () => {
    const model = parseLayersModelJson(bytes(modelJson()));
    expect(model.inputShape).toEqual([4]);
    expect(model.outputUnits).toBe(3);
    expect(model.outputActivation).toBe("softmax");
    expect(model.parameters).toBe(67);
    expect(model.weightBytes).toBe(WEIGHT_BYTES);
    expect(model.groups).toEqual([{ paths: ["weights.bin"], bytes: WEIGHT_BYTES }]);
    expect(model.weights.map((w) => w.byteOffset)).toEqual([0, 128, 160, 256]);
    expect(layersModelTensors(model).map((t) => t.name)).toEqual([
      "dense_Dense1/kernel",
      "dense_Dense1/bias",
      "dense_Dense2/kernel",
      "dense_Dense2/bias",
    ]);
  });

  it("keeps a frozen layer's weights out of the trained tensors", () => {
    const json = modelJson();
    const layers = json.modelTopology as { config: { layers: { config: { trainable: boolean } }[] } };
    const first = layers.config.layers[0];
    if (first) first.config.trainable = false;
    const model = parseLayersModelJson(bytes(json));
    expect(model.parameters).toBe(27);
    expect(layersModelTensors(model).map((t) => t.name)).toEqual([
      "dense_Dense2/kernel",
      "dense_Dense2/bias",
    ]);
  });

  it("finds the output of a functional model through its Activation layer", () => {
    const model = parseLayersModelJson(
      bytes(
        modelJson({
          topology: {
            class_name: "Model",
            config: {
              name: "functional",
              layers: [
                {
                  class_name: "InputLayer",
                  name: "in",
                  config: { name: "in", batch_input_shape: [null, 4] },
                },
                { class_name: "Dense", name: "dense_Dense1", config: { name: "dense_Dense1", units: 8 } },
                {
                  class_name: "Dense",
                  name: "dense_Dense2",
                  config: { name: "dense_Dense2", units: 3 },
                  inbound_nodes: [[["dense_Dense1", 0, 0, {}]]],
                },
                {
                  class_name: "Activation",
                  name: "act",
                  config: { name: "act", activation: "softmax" },
                  inbound_nodes: [[["dense_Dense2", 0, 0, {}]]],
                },
              ],
              input_layers: [["in", 0, 0]],
              output_layers: [["act", 0, 0]],
            },
          },
        }),
      ),
    );
    expect(model.inputShape).toEqual([4]);
    expect(model.outputUnits).toBe(3);
    expect(model.outputActivation).toBe("softmax");
  });

  it.each([
    ["malformed JSON", bytes('{"format": "layers-model", '), /is not valid JSON/],
    ["a JSON array", bytes("[]"), /is not a JSON object/],
    ["a graph model", bytes({ ...modelJson(), format: "graph-model" }), /only TF\.js Layers models/],
    ["no topology", bytes({ ...modelJson(), modelTopology: undefined }), /has no modelTopology/],
    [
      "an unknown layer",
      bytes(modelJson({ layers: [{ class_name: "MyFancyLayer", config: { name: "fancy" } }] })),
      /layer 0 \(fancy\) is a MyFancyLayer, which Barnraise cannot train/,
    ],
    [
      "batch normalization",
      bytes(modelJson({ layers: [{ class_name: "BatchNormalization", config: { name: "bn" } }] })),
      /is a BatchNormalization/,
    ],
    ["no weights manifest", bytes({ ...modelJson(), weightsManifest: [] }), /has no weightsManifest/],
    [
      "int32 weights",
      bytes(
        modelJson({ manifest: [{ paths: ["w.bin"], weights: [{ name: "x", shape: [2], dtype: "int32" }] }] }),
      ),
      /weight x is int32; only float32/,
    ],
    [
      "quantized weights",
      bytes(
        modelJson({
          manifest: [
            {
              paths: ["w.bin"],
              weights: [{ name: "x", shape: [2], dtype: "float32", quantization: { dtype: "uint8" } }],
            },
          ],
        }),
      ),
      /weight x is quantized/,
    ],
    [
      "a path outside the upload",
      bytes(modelJson({ manifest: [{ paths: ["../model.json"], weights: [{ name: "x", shape: [2] }] }] })),
      /is not a plain file name/,
    ],
    [
      "a convolutional output",
      bytes(
        modelJson({
          layers: [
            { class_name: "Dense", config: { name: "d", units: 2, batch_input_shape: [null, 4] } },
            { class_name: "Reshape", config: { name: "r", target_shape: [2, 1] } },
          ],
          manifest: [{ paths: ["w.bin"], weights: [{ name: "d/kernel", shape: [4, 2] }] }],
        }),
      ),
      /the output layer is a Reshape; it must be Dense/,
    ],
    [
      "no input shape",
      bytes(
        modelJson({
          layers: [{ class_name: "Dense", config: { name: "d", units: 2 } }],
          manifest: [{ paths: ["w.bin"], weights: [{ name: "d/kernel", shape: [4, 2] }] }],
        }),
      ),
      /no input shape/,
    ],
  ])("refuses %s with its own message", (_what, input, message) => {
    const error = refusal(() => parseLayersModelJson(input));
    expect(error.file).toBe("model.json");
    expect(error.message).toMatch(message);
  });

  it("refuses a model.json over the size limit and a model over the parameter limit", () => {
    const padded = new Uint8Array(LAYERS_MODEL_LIMITS.modelJsonBytes + 1).fill(0x20);
    expect(refusal(() => parseLayersModelJson(padded)).message).toMatch(/the limit is/);
    const huge = modelJson({
      layers: [
        { class_name: "Dense", config: { name: "d", units: 40_000, batch_input_shape: [null, 1000] } },
      ],
      manifest: [{ paths: ["w.bin"], weights: [{ name: "d/kernel", shape: [1000, 40_000] }] }],
    });
    expect(refusal(() => parseLayersModelJson(bytes(huge))).message).toMatch(
      /has 40000000 trainable parameters; the limit is 32000000/,
    );
  });
});

describe("checkLayersWeightFiles", () => {
  const model = parseLayersModelJson(bytes(modelJson()));

  it("returns the shards in manifest order when their sizes fit", () => {
    expect(checkLayersWeightFiles(model, new Map([["weights.bin", WEIGHT_BYTES]]))).toEqual(["weights.bin"]);
  });

  it("refuses weights that do not match the manifest, a missing shard and a stray file", () => {
    const short = refusal(() => checkLayersWeightFiles(model, new Map([["weights.bin", WEIGHT_BYTES - 4]])));
    expect(short.file).toBe("weights.bin");
    expect(short.message).toMatch(
      `holds ${WEIGHT_BYTES - 4} bytes, but the weights the manifest lists for it need ${WEIGHT_BYTES}`,
    );
    const missing = refusal(() => checkLayersWeightFiles(model, new Map()));
    expect(missing.message).toMatch(
      /weights\.bin: is named by model\.json's weightsManifest but was not uploaded/,
    );
    const stray = refusal(() =>
      checkLayersWeightFiles(
        model,
        new Map([
          ["weights.bin", WEIGHT_BYTES],
          ["other.bin", 4],
        ]),
      ),
    );
    expect(stray.file).toBe("other.bin");
  });

  it("accepts a group split over several shards when they add up", () => {
    const [group] = modelJson().weightsManifest as { paths: string[]; weights: unknown[] }[];
    const split = parseLayersModelJson(
      bytes({ ...modelJson(), weightsManifest: [{ ...group, paths: ["a.bin", "b.bin"] }] }),
    );
    expect(
      checkLayersWeightFiles(
        split,
        new Map([
          ["a.bin", 200],
          ["b.bin", WEIGHT_BYTES - 200],
        ]),
      ),
    ).toEqual(["a.bin", "b.bin"]);
    expect(
      refusal(() =>
        checkLayersWeightFiles(
          split,
          new Map([
            ["a.bin", 200],
            ["b.bin", 4],
          ]),
        ),
      ).message,
    ).toMatch(/a\.bin, b\.bin hold 204 bytes/);
  });
});

describe("canonicalLayersModelJson", () => {
  it("names the weights by their hash, and re-parses to the same model", () => {
    const model = parseLayersModelJson(bytes(modelJson()));
    const weightsSha = createHash("sha256").update("weights").digest("hex");
    const canonical = canonicalLayersModelJson(model, weightsSha);
    const again = parseLayersModelJson(canonical);
    expect(again.groups).toEqual([{ paths: [`weights-${weightsSha}.bin`], bytes: WEIGHT_BYTES }]);
    expect(LAYERS_WEIGHTS_FILE.exec(again.groups[0]?.paths[0] ?? "")?.[1]).toBe(weightsSha);
    expect(again.weights).toEqual(model.weights);
    // Canonical bytes are a function of the model: the same upload gives the same id.
    expect(canonicalLayersModelJson(again, weightsSha)).toEqual(canonical);
  });
});

describe("the layers model config", () => {
  const sha256 = "a".repeat(64);

  it("fills in the task's loss and metric, and needs the dataset named", () => {
    const parsed = safeParseExperimentConfig({
      model: { kind: "uploaded", sha256 },
      dataset: { name: "iris" },
    });
    expect(parsed.ok && parsed.config.model).toEqual({
      kind: "uploaded",
      sha256,
      task: "classification",
      loss: "sparse-categorical-crossentropy",
      metrics: ["accuracy"],
    });
    const regression = safeParseExperimentConfig({
      model: { kind: "uploaded", sha256, task: "regression" },
      dataset: { name: "houses" },
    });
    expect(regression.ok && regression.config.model).toMatchObject({
      loss: "mean-squared-error",
      metrics: ["mean-absolute-error"],
    });
    const unnamed = safeParseExperimentConfig({ model: { kind: "uploaded", sha256 } });
    expect(unnamed.ok ? [] : unnamed.issues).toEqual([
      { path: "dataset.name", message: "an uploaded model needs the dataset it trains on" },
    ]);
  });

  it("refuses a loss or metric that does not fit the task, and a malformed hash", () => {
    const wrong = safeParseExperimentConfig({
      model: {
        kind: "uploaded",
        sha256,
        task: "regression",
        loss: "sparse-categorical-crossentropy",
        metrics: ["accuracy"],
      },
      dataset: { name: "houses" },
    });
    expect(wrong.ok ? [] : wrong.issues.map((issue) => issue.path)).toEqual(["model.loss", "model.metrics"]);
    const badHash = safeParseExperimentConfig({
      model: { kind: "uploaded", sha256: "xyz" },
      dataset: { name: "d" },
    });
    expect(badHash.ok ? [] : badHash.issues.map((issue) => issue.path)).toEqual(["model.sha256"]);
  });

  it("offers the language-model tasks with cross-entropy, perplexity and accuracy, and masking only where tokens are masked", () => {
    const nextToken = safeParseExperimentConfig({
      model: { kind: "uploaded", sha256, task: "next-token" },
      dataset: { name: "poems" },
    });
    expect(nextToken.ok && nextToken.config.model).toEqual({
      kind: "uploaded",
      sha256,
      task: "next-token",
      loss: "sparse-categorical-crossentropy",
      metrics: ["perplexity"],
    });
    const masked = safeParseExperimentConfig({
      model: {
        kind: "uploaded",
        sha256,
        task: "masked-tokens",
        maskProbability: 0.2,
        metrics: ["perplexity", "accuracy"],
      },
      dataset: { name: "poems" },
    });
    expect(masked.ok && masked.config.model).toMatchObject({
      maskProbability: 0.2,
      metrics: ["perplexity", "accuracy"],
    });
    const wrong = safeParseExperimentConfig({
      model: {
        kind: "uploaded",
        sha256,
        task: "next-token",
        loss: "mean-squared-error",
        maskProbability: 0.2,
      },
      dataset: { name: "poems" },
    });
    expect(wrong.ok ? [] : wrong.issues).toEqual([
      {
        path: "model.loss",
        message: "mean-squared-error does not fit next-token; use sparse-categorical-crossentropy",
      },
      {
        path: "model.maskProbability",
        message: "maskProbability is for the masked-tokens task, not next-token",
      },
    ]);
    const perplexityOfRows = safeParseExperimentConfig({
      model: { kind: "uploaded", sha256, metrics: ["perplexity"] },
      dataset: { name: "iris" },
    });
    expect(perplexityOfRows.ok ? [] : perplexityOfRows.issues.map((issue) => issue.path)).toEqual([
      "model.metrics",
    ]);
  });

  it("still ties each preset to its dataset", () => {
    const parsed = safeParseExperimentConfig({ model: { kind: "mnist-mlp" }, dataset: { name: "iris" } });
    expect(parsed.ok ? [] : parsed.issues).toEqual([
      { path: "dataset.name", message: "model mnist-mlp trains on mnist, not iris" },
    ]);
  });
});
