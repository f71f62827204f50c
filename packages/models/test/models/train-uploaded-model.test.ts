import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as layers from "@tensorflow/tfjs";
import * as tf from "@tensorflow/tfjs-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createBatchStream } from "../../src/data/batch-stream.ts";
import { HttpDatasetSource } from "../../src/data/http-dataset-source.ts";
import { loadModel } from "../../src/models/model-kinds.ts";
import { SeededRandom } from "../../src/seeded-random.ts";
import { selectNodeBackend } from "../../src/node/node-backends.ts";
import { ensureBackendTrains } from "../../src/tf/backend-kernels.ts";
import { evaluateModel } from "../../src/evaluation/evaluate.ts";
import { type DatasetServer, imageDataset, serveDataset, tabularDataset } from "../data/dataset-fixture.ts";
import {
  classifierModel,
  layersConfig,
  type ModelServer,
  serveModels,
  storeModel,
} from "./layers-fixture.ts";
import { directoryStore } from "../../src/node/directory-store.ts";

/**
 * The whole path of an uploaded model on one peer, over real HTTP: download and verify the model,
 * stream a tabular dataset that fits it, take gradient steps, and score the held-out split. Three
 * well-separated classes in 4 features: a model that learns anything gets them right.
 */

/** Row `i`: class i % 3, its feature raised by 2, every feature jittered by ±0.5. */
function separable(i: number, split: string): { features: number[]; label: number } {
  const random = new SeededRandom(i, split === "train" ? 1 : 2);
  const label = i % 3;
  const features = [0, 1, 2, 3].map((j) => (j === label ? 2 : 0) + random.nextFloat() - 0.5);
  return { features, label };
}

let dataDir: string;
let models: ModelServer | undefined;
let data: DatasetServer | undefined;

beforeAll(async () => {
  await selectNodeBackend("cpu");
  await selectNodeBackend("wasm");
  dataDir = await mkdtemp(join(tmpdir(), "barnraise-train-layers-"));
});

afterAll(async () => {
  await models?.close();
  await data?.close();
  await rm(dataDir, { recursive: true, force: true });
});

describe.each(["cpu", "wasm"] as const)("training an uploaded model on %s", (backend) => {
  it("downloads it, verifies it, and its held-out loss drops as it trains", async () => {
    await tf.setBackend(backend);
    const stored = await storeModel(classifierModel({ dropout: 0.1 }));
    models = await serveModels([stored]);
    const dataset = tabularDataset({
      train: 300,
      test: 60,
      recordsPerShard: 100,
      features: 4,
      classes: ["a", "b", "c"],
      row: separable,
    });
    data = await serveDataset(dataset);
    const config = layersConfig(stored.sha256);
    const model = await loadModel(config.model, {
      server: new URL(models.url),
      cache: directoryStore(join(dataDir, "models")),
    });
    const source = new HttpDatasetSource({ serverUrl: data.url, dataset: dataset.manifest.name });
    const options = { source, seed: 5, config, kind: model.kind } as const;
    const test = () => createBatchStream({ ...options, split: "test", batchSize: 25 });
    try {
      let theta = model.initialParameters(0);
      const before = await evaluateModel(model, theta, test());
      const train = createBatchStream({ ...options, split: "train", batchSize: 16 });
      let step = 0;
      for await (const batch of train) {
        model.setParameters(theta);
        const { gradient } = await model.computeGradients(batch, step);
        theta = theta.map((value, i) => value - 0.3 * (gradient[i] ?? 0));
        if (++step === 60) break;
      }
      const after = await evaluateModel(model, theta, test());
      expect(before.predictions).toBe(60);
      expect(after.loss).toBeLessThan(before.loss / 2);
      expect(after.accuracy).toBeGreaterThan(0.9);
      expect(after.metrics).toEqual({ accuracy: after.accuracy });
    } finally {
      model.dispose();
      await models.close();
      await data.close();
      models = undefined;
      data = undefined;
    }
  });
});

describe("training an uploaded convolutional model on images", () => {
  /** Image i: class i % 2 lights the top (0) or bottom (1) half of a 6×6 grey image, with noise. */
  function halves(i: number, split: string): { pixels: Uint8Array; label: number } {
    const random = new SeededRandom(i, split === "train" ? 3 : 4);
    const label = i % 2;
    const pixels = new Uint8Array(36);
    for (let p = 0; p < 36; p++) {
      const top = p < 18;
      const lit = top === (label === 0);
      pixels[p] = Math.round((lit ? 180 : 40) + 60 * (random.nextFloat() - 0.5));
    }
    return { pixels, label };
  }

  it("learns to tell the images' classes apart from their pixels (on cpu: wasm cannot train a convolution)", async () => {
    await tf.setBackend("wasm");
    const conv = layers.sequential();
    conv.add(
      layers.layers.conv2d({
        inputShape: [6, 6, 1],
        filters: 2,
        kernelSize: 3,
        activation: "tanh",
        kernelInitializer: layers.initializers.glorotUniform({ seed: 1 }),
      }),
    );
    conv.add(layers.layers.flatten());
    conv.add(
      layers.layers.dense({
        units: 2,
        activation: "softmax",
        kernelInitializer: layers.initializers.glorotUniform({ seed: 2 }),
      }),
    );
    const stored = await storeModel(conv);
    const imageModels = await serveModels([stored]);
    const dataset = imageDataset({
      train: 200,
      test: 40,
      recordsPerShard: 50,
      width: 6,
      height: 6,
      channels: 1,
      classes: ["top", "bottom"],
      image: halves,
    });
    const images = await serveDataset(dataset);
    const config = layersConfig(stored.sha256, {}, "image-test");
    const model = await loadModel(config.model, {
      server: new URL(imageModels.url),
      cache: directoryStore(join(dataDir, "models")),
    });
    try {
      expect(model.uploaded?.inputShape).toEqual([6, 6, 1]);
      const warnings: string[] = [];
      expect(await ensureBackendTrains(model, (message) => warnings.push(message))).toBe("cpu");
      expect(warnings).toEqual([
        "the wasm backend has no Conv2DBackpropFilter kernel, which training this model needs; " +
          "training on the cpu backend instead (slower)",
      ]);
      const source = new HttpDatasetSource({ serverUrl: images.url, dataset: "image-test" });
      const options = { source, seed: 9, config, kind: model.kind } as const;
      const test = () => createBatchStream({ ...options, split: "test", batchSize: 20 });
      let theta = model.initialParameters(0);
      const before = await evaluateModel(model, theta, test());
      let step = 0;
      for await (const batch of createBatchStream({ ...options, split: "train", batchSize: 16 })) {
        model.setParameters(theta);
        const { gradient } = await model.computeGradients(batch, step);
        theta = theta.map((value, i) => value - 0.3 * (gradient[i] ?? 0));
        if (++step === 120) break;
      }
      const after = await evaluateModel(model, theta, test());
      expect(after.predictions).toBe(40);
      expect(after.loss).toBeLessThan(before.loss);
      expect(after.accuracy).toBeGreaterThan(0.9);
    } finally {
      model.dispose();
      await imageModels.close();
      await images.close();
    }
  });
});
