import { parseExperimentConfig } from "@barnraise/protocol";
import { afterEach, describe, expect, it } from "vitest";
import { createBatchStream } from "../../src/data/batch-stream.ts";
import { DatasetErrorCode, isDatasetError } from "../../src/data/dataset-error.ts";
import { HttpDatasetSource } from "../../src/data/http-dataset-source.ts";
import type { Batch, TabularBatch } from "../../src/models/batch.ts";
import type { UploadedModelShape } from "../../src/models/trainable-model.ts";
import {
  type Dataset,
  type DatasetServer,
  imageDataset,
  serveDataset,
  tabularDataset,
} from "./dataset-fixture.ts";
import { modelKindOf } from "../../src/models/model-kinds.ts";

/** Batches for an uploaded model: tabular rows, once the dataset is known to fit the model. */

const SHA = "ab".repeat(32);
const classifier = parseExperimentConfig({
  model: { kind: "uploaded", sha256: SHA },
  dataset: { name: "tabular-test", shuffleBufferSize: 8 },
});
const regression = parseExperimentConfig({
  model: { kind: "uploaded", sha256: SHA, task: "regression" },
  dataset: { name: "tabular-test" },
});
/** A 2×2 input (4 features) and 3 outputs. */
const shape: UploadedModelShape = { inputShape: [2, 2], features: 4, outputUnits: 3, activationFloats: 20 };

/** Row `i` has features i, i+0.5, −i, 1 and class i % 3. */
const rows = (features = 4, classes: string[] | null = ["a", "b", "c"]): Dataset =>
  tabularDataset({
    train: 40,
    test: 7,
    recordsPerShard: 10,
    features,
    classes,
    row: (i) => ({
      features: [i, i + 0.5, -i, 1].slice(0, features),
      label: classes === null ? i / 2 : i % 3,
    }),
  });

let server: DatasetServer | undefined;

afterEach(async () => {
  await server?.close();
  server = undefined;
});

async function stream(
  dataset: Dataset,
  options: { config?: typeof classifier; split?: "train" | "test"; uploaded?: UploadedModelShape } = {},
): Promise<AsyncGenerator<Batch, void, undefined>> {
  server = await serveDataset(dataset);
  const source = new HttpDatasetSource({ serverUrl: server.url, dataset: dataset.manifest.name });
  return createBatchStream({
    source,
    split: options.split ?? "train",
    batchSize: 4,
    seed: 3,
    config: options.config ?? classifier,
    kind: modelKindOf((options.config ?? classifier).model, "uploaded" in options ? options.uploaded : shape),
  });
}

async function first(batches: AsyncGenerator<Batch, void, undefined>): Promise<TabularBatch> {
  const { value } = await batches.next();
  await batches.return();
  if (value === undefined || value.kind !== "tabular") throw new Error("expected a tabular batch");
  return value;
}

async function refusal(batches: AsyncGenerator<Batch, void, undefined>): Promise<Error> {
  const error = await batches.next().then(
    () => undefined,
    (reason: unknown) => reason,
  );
  expect(isDatasetError(error, DatasetErrorCode.INCOMPATIBLE)).toBe(true);
  return error as Error;
}

describe("createBatchStream for an uploaded model", () => {
  it("reads the test split in order as tabular batches", async () => {
    const batches: TabularBatch[] = [];
    for await (const batch of await stream(rows(), { split: "test" })) {
      if (batch.kind !== "tabular") throw new Error("expected tabular batches");
      batches.push(batch);
    }
    expect(batches.map((b) => b.size)).toEqual([4, 3]);
    expect([...(batches[0]?.features.subarray(0, 8) ?? [])]).toEqual([0, 0.5, -0, 1, 1, 1.5, -1, 1]);
    expect([...(batches[0]?.labels ?? [])]).toEqual([0, 1, 2, 0]);
  });

  it("shuffles train rows, keeping each row's label with its features", async () => {
    const batch = await first(await stream(rows()));
    expect(batch.size).toBe(4);
    for (let r = 0; r < batch.size; r++) {
      const id = batch.features[4 * r] ?? NaN;
      expect(batch.labels[r]).toBe(id % 3);
    }
  });

  it("streams value labels for a regression", async () => {
    const batch = await first(
      await stream(rows(4, null), { config: regression, uploaded: { ...shape, outputUnits: 1 } }),
    );
    for (let r = 0; r < batch.size; r++) expect(batch.labels[r]).toBe((batch.features[4 * r] ?? NaN) / 2);
  });

  it("refuses a dataset whose feature count does not fit the model's input", async () => {
    const error = await refusal(await stream(rows(3)));
    expect(error.message).toMatch(/its records have 3 features, but the model's input \[2, 2\] takes 4/);
  });

  it("refuses a dataset with other classes than the model's outputs", async () => {
    const error = await refusal(await stream(rows(4, ["a", "b"])));
    expect(error.message).toMatch(/the label y has 2 classes, but the model's output layer has 3 units/);
  });

  it("refuses labels of the other task", async () => {
    expect((await refusal(await stream(rows(4, null)))).message).toMatch(
      /classifier, but the label y is a value/,
    );
    expect(
      (await refusal(await stream(rows(), { config: regression, uploaded: { ...shape, outputUnits: 1 } })))
        .message,
    ).toMatch(/regression, but the label y is a class/);
  });

  it("refuses records of another format", async () => {
    const dataset = rows();
    const mnistLike = { ...dataset, manifest: { ...dataset.manifest, name: "mnist" } } as Dataset;
    const config = parseExperimentConfig({
      model: { kind: "uploaded", sha256: SHA },
      dataset: { name: "mnist" },
    });
    server = await serveDataset(mnistLike, {
      manifestJson: {
        ...mnistLike.manifest,
        format: "mnist-u8",
        options: { recordsPerShard: 10, limit: null },
        record: {
          bytes: 785,
          image: { offset: 0, width: 28, height: 28, channels: 1, dtype: "uint8", layout: "row-major" },
          label: { offset: 784, dtype: "uint8", classes: 10 },
        },
      },
    });
    const source = new HttpDatasetSource({ serverUrl: server.url, dataset: "mnist" });
    const batches = createBatchStream({
      source,
      split: "test",
      batchSize: 4,
      seed: 1,
      config,
      kind: modelKindOf(config.model, shape),
    });
    expect((await refusal(batches)).message).toMatch(
      /trains on tabular-f32 or image-u8 records, not mnist-u8/,
    );
  });

  it("refuses a manifest whose record size contradicts its feature count", async () => {
    const dataset = rows();
    const manifest = dataset.manifest;
    if (manifest.format !== "tabular-f32") throw new Error("expected a tabular manifest");
    server = await serveDataset(dataset, {
      manifestJson: { ...manifest, record: { ...manifest.record, bytes: 16 } },
    });
    const source = new HttpDatasetSource({ serverUrl: server.url, dataset: manifest.name });
    const error = await source.manifest().then(
      () => undefined,
      (reason: unknown) => reason,
    );
    expect(isDatasetError(error, DatasetErrorCode.MANIFEST_INVALID)).toBe(true);
    expect((error as Error).message).toMatch(
      /4 float32 features and a label is 20 bytes, not the 16 it says/,
    );
  });

  it("needs the loaded model's shape", async () => {
    await expect(stream(rows(), { uploaded: undefined })).rejects.toThrow(
      /needs its shape: use the built model's/,
    );
  });
});

describe("createBatchStream for an uploaded model on images", () => {
  const imageConfig = (task: "classification" | "regression" = "classification") =>
    parseExperimentConfig({
      model: { kind: "uploaded", sha256: SHA, task },
      dataset: { name: "image-test", shuffleBufferSize: 8 },
    });
  /** 4×4 grey images (16 values): image i has every byte 10·i, class i % 3. */
  const images = (classes = ["a", "b", "c"]): Dataset =>
    imageDataset({
      train: 30,
      test: 5,
      recordsPerShard: 8,
      width: 4,
      height: 4,
      channels: 1,
      classes,
      image: (i) => ({ pixels: new Uint8Array(16).fill(10 * i), label: i % 3 }),
    });
  const imageShape: UploadedModelShape = {
    inputShape: [4, 4, 1],
    features: 16,
    outputUnits: 3,
    activationFloats: 20,
  };

  it("scales pixels to [0, 1] and keeps each image's class", async () => {
    const batches: TabularBatch[] = [];
    for await (const batch of await stream(images(), {
      config: imageConfig(),
      split: "test",
      uploaded: imageShape,
    })) {
      if (batch.kind !== "tabular") throw new Error("expected tabular batches");
      batches.push(batch);
    }
    expect(batches.map((b) => b.size)).toEqual([4, 1]);
    expect([...(batches[0]?.features.subarray(16, 32) ?? [])]).toEqual(
      new Array(16).fill(Math.fround(10 / 255)),
    );
    expect([...(batches[0]?.labels ?? [])]).toEqual([0, 1, 2, 0]);
    const train = await first(await stream(images(), { config: imageConfig(), uploaded: imageShape }));
    for (let r = 0; r < train.size; r++) {
      const i = Math.round(((train.features[16 * r] ?? NaN) * 255) / 10);
      expect(train.labels[r]).toBe(i % 3);
    }
  });

  it("refuses images that do not fill the model's input, other classes, or a regression", async () => {
    expect(
      (
        await refusal(
          await stream(images(), {
            config: imageConfig(),
            uploaded: { ...imageShape, inputShape: [4], features: 4 },
          }),
        )
      ).message,
    ).toMatch(/its images are 4×4×1 \(16 values\), but the model's input \[4\] takes 4/);
    expect(
      (
        await refusal(
          await stream(images(["a", "b", "c", "d"]), { config: imageConfig(), uploaded: imageShape }),
        )
      ).message,
    ).toMatch(/it has 4 classes, but the model's output layer has 3 units/);
    expect(
      (await refusal(await stream(images(), { config: imageConfig("regression"), uploaded: imageShape })))
        .message,
    ).toMatch(/labels are classes; train a classifier/);
  });
});
