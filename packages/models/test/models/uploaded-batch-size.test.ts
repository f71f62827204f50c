import * as tf from "@tensorflow/tfjs-core";
import * as tfl from "@tensorflow/tfjs";
import { beforeAll, describe, expect, it } from "vitest";
import { checkTabularBatch } from "../../src/models/batch-checks.ts";
import { verifyModelJson, verifyWeights } from "../../src/models/layers-artifact.ts";
import { UploadedLayersModel } from "../../src/models/layers-model.ts";
import { resolveBatchSize } from "../../src/models/auto-batch-size.ts";
import { syntheticBatch } from "../../src/data/synthetic-batch.ts";
import { classifierModel, layersConfig, regressionModel, storeModel } from "./layers-fixture.ts";
import { modelKindOf } from "../../src/models/model-kinds.ts";

/** The automatic batch size for an uploaded model: synthetic rows of its shape and its activation estimate. */

beforeAll(async () => {
  await tf.setBackend("cpu");
});

async function load(model: tfl.LayersModel, task: "classification" | "regression" = "classification") {
  const stored = await storeModel(model);
  const json = await verifyModelJson(new Uint8Array(stored.modelJson), stored.sha256);
  const config = layersConfig(stored.sha256, { task }).model;
  if (config.kind !== "uploaded") throw new Error("not a layers config");
  return UploadedLayersModel.load(config, await verifyWeights(json, new Uint8Array(stored.weights)));
}

/** 32 → 128 relu → dropout → 64 relu → 10 softmax: wide enough that activations dominate. */
function wideModel(): tfl.LayersModel {
  const model = tfl.sequential();
  model.add(tfl.layers.dense({ units: 128, activation: "relu", inputShape: [32] }));
  model.add(tfl.layers.dropout({ rate: 0.2 }));
  model.add(tfl.layers.dense({ units: 64, activation: "relu" }));
  model.add(tfl.layers.dense({ units: 10, activation: "softmax" }));
  return model;
}

describe("an uploaded model's batch size", () => {
  it("gets synthetic rows of its shape, with labels of its task", async () => {
    const classifier = await load(classifierModel());
    const regressor = await load(regressionModel(), "regression");
    try {
      const rows = checkTabularBatch(syntheticBatch(classifier.kind, 50, 3), 4, 3);
      expect(rows.size).toBe(50);
      expect(new Set(rows.labels).size).toBe(3);
      expect(syntheticBatch(classifier.kind, 50, 3)).toEqual(rows);
      const values = syntheticBatch(regressor.kind, 20, 3);
      expect(checkTabularBatch(values, 3, undefined).labels.some((label) => !Number.isInteger(label))).toBe(
        true,
      );
      expect((await regressor.computeGradients(values, 0)).samples).toBe(20);
      expect(() => syntheticBatch(modelKindOf(classifier.config), 5, 3)).toThrow(/needs its shape/);
      expect(() => modelKindOf(classifier.config).bytesPerSample).toThrow(/needs its shape/);
    } finally {
      classifier.dispose();
      regressor.dispose();
    }
  });

  it("estimates activation memory above the measured peak growth per row", async () => {
    const model = await load(wideModel());
    try {
      model.setParameters(model.initialParameters(0));
      const peak = async (size: number): Promise<number> => {
        const batch = syntheticBatch(model.kind, size, 5);
        const base = tf.memory().numBytes;
        const profile = await tf.profile(async () => {
          await model.computeGradients(batch, 1);
        });
        return profile.peakBytes - base;
      };
      const measured = ((await peak(256)) - (await peak(64))) / (256 - 64);
      const estimate = model.kind.bytesPerSample;
      expect(estimate).toBeGreaterThanOrEqual(measured);
      expect(estimate).toBeLessThanOrEqual(3 * measured);
    } finally {
      model.dispose();
    }
  });

  it("is measured on the model itself when the config says auto", async () => {
    const model = await load(classifierModel());
    try {
      model.setParameters(model.initialParameters(0));
      const choice = await resolveBatchSize({
        requested: "auto",
        targetBatchSize: 256,
        model,
        memoryBytes: 1 << 30,
      });
      expect(choice.source).toBe("auto");
      expect(choice.batchSize).toBeGreaterThanOrEqual(8);
      expect(choice.batchSize).toBeLessThanOrEqual(64);
    } finally {
      model.dispose();
    }
  });
});
