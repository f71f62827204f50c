import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as tf from "@tensorflow/tfjs-core";
import * as tfl from "@tensorflow/tfjs";
import type { UploadedModelConfig } from "@barnraise/protocol";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { TabularBatch } from "../../src/models/batch.ts";
import { createModel, loadModel } from "../../src/models/model-kinds.ts";
import { verifyModelJson, verifyWeights, type LayersArtifact } from "../../src/models/layers-artifact.ts";
import { UploadedLayersModel } from "../../src/models/layers-model.ts";
import { isModelError, ModelErrorCode } from "../../src/models/model-error.ts";
import { SeededRandom } from "../../src/seeded-random.ts";
import { selectNodeBackend } from "../../src/node/node-backends.ts";
import {
  classifierModel,
  layersConfig,
  regressionModel,
  serveModels,
  storeModel,
  type StoredModel,
} from "./layers-fixture.ts";
import { directoryStore } from "../../src/node/directory-store.ts";

/**
 * The uploaded-model TrainableModel: the organizer's weights come back bit for bit, the gradient of
 * each loss is the derivative of the loss (checked against finite differences of an independent
 * float64 forward pass), on the pure-JS and the WebAssembly backend alike, and a model whose bytes
 * are not the signed ones is never built.
 */

beforeAll(async () => {
  await selectNodeBackend("cpu");
  await selectNodeBackend("wasm");
});

async function artifactOf(stored: StoredModel): Promise<LayersArtifact> {
  const json = await verifyModelJson(new Uint8Array(stored.modelJson), stored.sha256);
  return verifyWeights(json, new Uint8Array(stored.weights));
}

function modelConfig(stored: StoredModel, model: Partial<Omit<UploadedModelConfig, "kind" | "sha256">> = {}) {
  const { model: config } = layersConfig(stored.sha256, model);
  if (config.kind !== "uploaded") throw new Error("not a layers config");
  return config;
}

/** `size` rows of `features` values in [-1, 1), labels cycling through `classes` (or values in [-1, 1)). */
function rows(size: number, features: number, classes: number | undefined, seed: number): TabularBatch {
  const random = new SeededRandom(seed);
  return {
    kind: "tabular",
    size,
    features: new Float32Array(size * features).map(() => 2 * random.nextFloat() - 1),
    labels: new Float32Array(size).map((_, i) =>
      classes === undefined ? 2 * random.nextFloat() - 1 : i % classes,
    ),
  };
}

type Reference = {
  hidden: "relu" | "tanh";
  output: "softmax" | "linear";
  loss: "sparse-categorical-crossentropy" | "mean-squared-error" | "mean-absolute-error";
  sizes: readonly [number, number, number];
};

/**
 * The loss of a Dense(hidden) → Dense(output) network in float64, written from the definitions:
 * θ is [kernel1 (row-major), bias1, kernel2, bias2], the manifest's order.
 */
function referenceLoss(theta: Float64Array, batch: TabularBatch, spec: Reference): number {
  const [inputs, hidden, outputs] = spec.sizes;
  const b1 = inputs * hidden;
  const k2 = b1 + hidden;
  const b2 = k2 + hidden * outputs;
  let total = 0;
  for (let r = 0; r < batch.size; r++) {
    const h = new Float64Array(hidden);
    for (let j = 0; j < hidden; j++) {
      let sum = theta[b1 + j] ?? 0;
      for (let i = 0; i < inputs; i++)
        sum += (batch.features[r * inputs + i] ?? 0) * (theta[i * hidden + j] ?? 0);
      h[j] = spec.hidden === "tanh" ? Math.tanh(sum) : Math.max(0, sum);
    }
    const o = new Float64Array(outputs);
    for (let k = 0; k < outputs; k++) {
      let sum = theta[b2 + k] ?? 0;
      for (let j = 0; j < hidden; j++) sum += (h[j] ?? 0) * (theta[k2 + j * outputs + k] ?? 0);
      o[k] = sum;
    }
    const label = batch.labels[r] ?? 0;
    if (spec.loss === "sparse-categorical-crossentropy") {
      const max = Math.max(...o);
      const logSum = Math.log(o.reduce((s, v) => s + Math.exp(v - max), 0)) + max;
      const logP = (o[label] ?? 0) - logSum;
      total -=
        spec.output === "softmax" ? Math.log(Math.min(Math.max(Math.exp(logP), 1e-7), 1 - 1e-7)) : logP;
    } else {
      const error = (o[0] ?? 0) - label;
      total += spec.loss === "mean-squared-error" ? error * error : Math.abs(error);
    }
  }
  return total / batch.size;
}

describe.each(["cpu", "wasm"] as const)("an uploaded model on %s", (backend) => {
  beforeAll(async () => {
    await tf.setBackend(backend);
  });

  it("starts from the uploaded weights, bit for bit, whatever the seed", async () => {
    const stored = await storeModel(classifierModel());
    const artifact = await artifactOf(stored);
    // A second copy in the process: TF.js renames its variables, the layout keeps the saved names.
    const twin = await UploadedLayersModel.load(modelConfig(stored), artifact);
    const model = await UploadedLayersModel.load(modelConfig(stored), artifact);
    twin.dispose();
    try {
      const initial = model.initialParameters(1);
      expect(Buffer.from(initial.buffer).equals(Buffer.from(stored.weights))).toBe(true);
      expect(model.initialParameters(2)).toEqual(initial);
      expect(model.layout.slots.map((slot) => slot.name)).toEqual(artifact.model.weights.map((w) => w.name));
      expect(model.layout.slots.map((slot) => slot.length)).toEqual([32, 8, 24, 3]);
      expect(model.uploaded).toMatchObject({ inputShape: [4], features: 4, outputUnits: 3 });
    } finally {
      model.dispose();
    }
  });

  it.each<{ name: string; spec: Reference; build: () => tfl.LayersModel; classes: number | undefined }>([
    {
      name: "cross-entropy of softmax probabilities",
      spec: { hidden: "tanh", output: "softmax", loss: "sparse-categorical-crossentropy", sizes: [4, 8, 3] },
      build: () => classifierModel({ hidden: "tanh" }),
      classes: 3,
    },
    {
      name: "cross-entropy of linear logits",
      spec: { hidden: "tanh", output: "linear", loss: "sparse-categorical-crossentropy", sizes: [4, 8, 3] },
      build: () => classifierModel({ hidden: "tanh", output: "linear" }),
      classes: 3,
    },
    {
      name: "mean squared error",
      spec: { hidden: "tanh", output: "linear", loss: "mean-squared-error", sizes: [3, 6, 1] },
      build: regressionModel,
      classes: undefined,
    },
    {
      name: "mean absolute error",
      spec: { hidden: "tanh", output: "linear", loss: "mean-absolute-error", sizes: [3, 6, 1] },
      build: regressionModel,
      classes: undefined,
    },
  ])(
    "computes the gradient of the $name (finite differences in float64)",
    async ({ spec, build, classes }) => {
      const stored = await storeModel(build());
      const task = classes === undefined ? "regression" : "classification";
      const model = await UploadedLayersModel.load(
        modelConfig(stored, { task, loss: spec.loss }),
        await artifactOf(stored),
      );
      try {
        const theta = model.initialParameters(0);
        model.setParameters(theta);
        const batch = rows(5, spec.sizes[0], classes, 17);
        const before = tf.memory().numTensors;
        const { loss, gradient, samples } = await model.computeGradients(batch, 1);
        expect(tf.memory().numTensors).toBe(before);
        expect(samples).toBe(5);
        const exact = Float64Array.from(theta);
        expect(loss).toBeCloseTo(referenceLoss(exact, batch, spec), 5);
        const step = 1e-5;
        let scale = 0;
        const numeric = Array.from(exact, (_, i) => {
          const plus = Float64Array.from(exact);
          const minus = Float64Array.from(exact);
          plus[i] = (plus[i] ?? 0) + step;
          minus[i] = (minus[i] ?? 0) - step;
          const value = (referenceLoss(plus, batch, spec) - referenceLoss(minus, batch, spec)) / (2 * step);
          scale = Math.max(scale, Math.abs(value));
          return value;
        });
        expect(scale).toBeGreaterThan(0);
        numeric.forEach((value, i) => {
          expect(Math.abs((gradient[i] ?? NaN) - value), `parameter ${i}`).toBeLessThan(1e-4 * scale + 1e-6);
        });
      } finally {
        model.dispose();
      }
    },
  );

  it("evaluates without dropout and reports the config's metrics", async () => {
    const classifier = await storeModel(classifierModel({ dropout: 0.5 }));
    const model = await UploadedLayersModel.load(modelConfig(classifier), await artifactOf(classifier));
    const regression = await storeModel(regressionModel());
    const regressor = await UploadedLayersModel.load(
      modelConfig(regression, { task: "regression", metrics: ["mean-absolute-error", "mean-squared-error"] }),
      await artifactOf(regression),
    );
    try {
      model.setParameters(model.initialParameters(0));
      const batch = rows(30, 4, 3, 5);
      const before = tf.memory().numTensors;
      const first = await model.evaluate(batch);
      expect(await model.evaluate(batch)).toEqual(first);
      expect(tf.memory().numTensors).toBe(before);
      expect(first.predictions).toBe(30);
      expect(first.accuracy).toBeGreaterThanOrEqual(0);
      expect(first.metrics).toEqual({ accuracy: first.accuracy });

      regressor.setParameters(regressor.initialParameters(0));
      const values = rows(10, 3, undefined, 6);
      const result = await regressor.evaluate(values);
      expect(result.accuracy).toBeNaN();
      const theta = Float64Array.from(regressor.initialParameters(0));
      const spec = { hidden: "tanh", output: "linear", sizes: [3, 6, 1] } as const;
      expect(result.loss).toBeCloseTo(
        referenceLoss(theta, values, { ...spec, loss: "mean-squared-error" }),
        5,
      );
      expect(result.metrics?.["mean-absolute-error"]).toBeCloseTo(
        referenceLoss(theta, values, { ...spec, loss: "mean-absolute-error" }),
        5,
      );
      expect(result.metrics?.["mean-squared-error"]).toBeCloseTo(result.loss, 6);
    } finally {
      model.dispose();
      regressor.dispose();
    }
  });

  it("draws dropout from the step's seed", async () => {
    const stored = await storeModel(classifierModel({ dropout: 0.5 }));
    const model = await UploadedLayersModel.load(modelConfig(stored), await artifactOf(stored));
    try {
      model.setParameters(model.initialParameters(0));
      const batch = rows(8, 4, 3, 9);
      const a = await model.computeGradients(batch, 7);
      const b = await model.computeGradients(batch, 7);
      const c = await model.computeGradients(batch, 8);
      expect(b.gradient).toEqual(a.gradient);
      expect(c.gradient).not.toEqual(a.gradient);
    } finally {
      model.dispose();
    }
  });
});

describe("loading an uploaded model", () => {
  let dataDir: string;

  beforeAll(async () => {
    await tf.setBackend("cpu");
    dataDir = await mkdtemp(join(tmpdir(), "barnraise-layers-"));
  });

  afterAll(async () => {
    await rm(dataDir, { recursive: true, force: true });
  });

  it("downloads, verifies and builds it, logging its progress", async () => {
    const stored = await storeModel(classifierModel());
    const server = await serveModels([stored]);
    try {
      const lines: string[] = [];
      const model = await loadModel(modelConfig(stored), {
        server: new URL(server.url),
        cache: directoryStore(join(dataDir, "models")),
        log: (line) => lines.push(line),
      });
      expect(model).toBeInstanceOf(UploadedLayersModel);
      expect(lines.some((line) => line.includes(stored.sha256.slice(0, 12)))).toBe(true);
      model.dispose();
    } finally {
      await server.close();
    }
  });

  it.each(["model.json", "weights"] as const)(
    "refuses a tampered %s with MODEL_TAMPERED and builds nothing",
    async (which) => {
      const stored = await storeModel(classifierModel());
      const target = which === "model.json" ? "model.json" : stored.weightsFile;
      const server = await serveModels([stored], { reply: (file) => (file === target ? "tamper" : "ok") });
      const before = tf.memory().numTensors;
      try {
        const error = await loadModel(modelConfig(stored), {
          server: new URL(server.url),
          cache: directoryStore(join(dataDir, "models")),
        }).then(
          () => undefined,
          (reason: unknown) => reason,
        );
        expect(isModelError(error, ModelErrorCode.MODEL_TAMPERED)).toBe(true);
        expect((error as Error).message).toMatch(/differs from the signed SHA-256/);
        expect(tf.memory().numTensors).toBe(before);
        if (which === "model.json") expect(server.requests).toEqual(["model.json"]);
      } finally {
        await server.close();
      }
    },
  );

  it("createModel refuses an uploaded model, which needs its files first", () => {
    const config = layersConfig("ab".repeat(32)).model;
    expect(() => createModel(config)).toThrow(/build it with loadModel/);
  });

  it("refuses files of another model than the config names", async () => {
    const stored = await storeModel(classifierModel());
    await expect(
      UploadedLayersModel.load({ ...modelConfig(stored), sha256: "cd".repeat(32) }, await artifactOf(stored)),
    ).rejects.toThrow(/the config names/);
  });

  it.each([
    {
      change: { task: "regression" as const },
      message: /one value per row, but the output layer has 3 units/,
    },
  ])("refuses a model whose output does not fit the task", async ({ change, message }) => {
    const stored = await storeModel(classifierModel());
    const error = await UploadedLayersModel.load(modelConfig(stored, change), await artifactOf(stored)).then(
      () => undefined,
      (reason: unknown) => reason,
    );
    expect(isModelError(error, ModelErrorCode.MODEL_INVALID)).toBe(true);
    expect((error as Error).message).toMatch(message);
  });

  it("refuses a classifier whose output is neither softmax nor linear", async () => {
    const model = tfl.sequential();
    model.add(tfl.layers.dense({ units: 3, activation: "sigmoid", inputShape: [4] }));
    const stored = await storeModel(model);
    await expect(UploadedLayersModel.load(modelConfig(stored), await artifactOf(stored))).rejects.toThrow(
      /activation is sigmoid.*softmax \(probabilities\) or linear \(logits\)/,
    );
  });

  it("adds the layers' regularization terms to the loss, as fit does", async () => {
    const build = (l2: number) => {
      const model = tfl.sequential();
      model.add(
        tfl.layers.dense({
          units: 3,
          activation: "softmax",
          inputShape: [4],
          kernelInitializer: tfl.initializers.glorotUniform({ seed: 3 }),
          ...(l2 > 0 ? { kernelRegularizer: tfl.regularizers.l2({ l2 }) } : {}),
        }),
      );
      return model;
    };
    const plain = await storeModel(build(0));
    const regularized = await storeModel(build(0.5));
    const a = await UploadedLayersModel.load(modelConfig(plain), await artifactOf(plain));
    const b = await UploadedLayersModel.load(modelConfig(regularized), await artifactOf(regularized));
    try {
      const theta = a.initialParameters(0);
      expect(b.initialParameters(0)).toEqual(theta);
      a.setParameters(theta);
      b.setParameters(theta);
      const batch = rows(6, 4, 3, 2);
      const kernel = theta.subarray(0, 12);
      const penalty = 0.5 * kernel.reduce((sum, w) => sum + w * w, 0);
      const [plainLoss, regularizedLoss] = await Promise.all([
        a.computeGradients(batch, 0),
        b.computeGradients(batch, 0),
      ]);
      expect(regularizedLoss.loss - plainLoss.loss).toBeCloseTo(penalty, 5);
    } finally {
      a.dispose();
      b.dispose();
    }
  });

  it("refuses batches that do not fit the model", async () => {
    const stored = await storeModel(classifierModel());
    const model = await UploadedLayersModel.load(modelConfig(stored), await artifactOf(stored));
    try {
      const good = rows(2, 4, 3, 1);
      const cases: [
        TabularBatch | { kind: "image"; size: number; pixels: Float32Array; labels: Int32Array },
        RegExp,
      ][] = [
        [{ ...good, features: new Float32Array(6) }, /features has 6 elements, expected 8/],
        [
          { ...good, labels: new Float32Array([0, 3]) },
          /labels\[1\] is 3; class labels must be whole numbers 0…2/,
        ],
        [{ ...good, labels: new Float32Array([0.5, 1]) }, /labels\[0\] is 0.5/],
        [{ ...good, features: new Float32Array(8).fill(Number.NaN) }, /must be finite/],
        [
          { kind: "image", size: 1, pixels: new Float32Array(784), labels: new Int32Array(1) },
          /trains on tabular batches/,
        ],
      ];
      for (const [batch, message] of cases) {
        expect(() => model.computeGradients(batch, 0)).toThrow(message);
      }
    } finally {
      model.dispose();
    }
    expect(() => {
      model.setParameters(new Float32Array(model.layout.size));
    }).toThrow(/disposed/);
  });
});
