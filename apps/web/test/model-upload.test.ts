import { createHash } from "node:crypto";
import * as tf from "@tensorflow/tfjs";
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import {
  LAYERS_MODEL_LIMITS,
  type DatasetManifest,
  type ImageManifest,
  type TabularManifest,
  type TokenManifest,
} from "@barnraise/protocol";
import { testDatabaseProviders } from "@barnraise/prisma/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { POST as createExperimentRoute } from "../app/api/v1/experiments/route.ts";
import { POST as uploadRoute } from "../app/api/v1/models/route.ts";
import { GET as summaryRoute } from "../app/api/v1/models/[sha256]/route.ts";
import { GET as fileRoute } from "../app/api/v1/models/[sha256]/[file]/route.ts";
import { writeManifestFile } from "../src/server/datasets/manifest.ts";
import { createTestUser, type TestUser } from "./support/actors.ts";
import {
  multipartOf,
  savedLayersModel,
  saveModelFiles,
  type SavedLayersModel,
} from "./support/layers-fixture.ts";
import { callRoute, createTestApp, type TestApp } from "./support/test-app.ts";

/**
 * Organizers upload their own TF.js Layers model: it is validated (each bad file refused with its
 * own message), stored content-addressed, served by hash for peers and `tf.loadLayersModel`, and a
 * run over it is published only when it fits its dataset.
 */

interface ModelBody {
  model: {
    sha256: string;
    inputShape: number[];
    outputUnits: number;
    outputActivation: string;
    parameters: number;
  };
}
interface ErrorBody {
  error: { code: string; message: string; issues?: { path: string; message: string }[] };
}

const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");

describe.each(testDatabaseProviders())("model upload (%s)", (provider) => {
  let app: TestApp;
  let organizer: TestUser;
  let saved: SavedLayersModel;

  beforeAll(async () => {
    app = await createTestApp(provider);
    organizer = await createTestUser(app);
    saved = await savedLayersModel({ inputs: 4, hidden: 8, classes: 3 });
  });
  afterAll(async () => {
    await app.dispose();
  });

  async function post(
    files: readonly { name: string; bytes: Uint8Array }[],
    as: "organizer" | "anonymous" = "organizer",
  ) {
    const cookie = as === "organizer" ? organizer.cookie : undefined;
    const { body, contentType } = await multipartOf(files);
    return callRoute(uploadRoute, "/api/v1/models", {
      method: "POST",
      body,
      headers: { "content-type": contentType },
      ...(cookie === undefined ? {} : { cookie }),
    });
  }

  /** The organizer publishes run `id` of `model` on `dataset` through the experiments route. */
  async function publish(id: string, model: Record<string, unknown>, dataset: string) {
    const response = await callRoute(createExperimentRoute, "/api/v1/experiments", {
      method: "POST",
      cookie: organizer.cookie,
      body: { id, name: id, config: { model, dataset: { name: dataset } } },
    });
    return { status: response.status, body: (await response.json()) as ErrorBody & { config?: unknown } };
  }

  function file(name: string): Uint8Array {
    const found = saved.files.find((entry) => entry.name === name);
    if (found === undefined) throw new Error(`no ${name}`);
    return found.bytes;
  }

  function withJson(edit: (json: Record<string, unknown>) => void): { name: string; bytes: Uint8Array }[] {
    const json = JSON.parse(new TextDecoder().decode(file("model.json"))) as Record<string, unknown>;
    edit(json);
    return [
      { name: "model.json", bytes: new TextEncoder().encode(JSON.stringify(json)) },
      { name: "weights.bin", bytes: file("weights.bin") },
    ];
  }

  it("stores a model saved by TF.js by its hash and serves both files as tf.loadLayersModel fetches them", async () => {
    const response = await post(saved.files);
    const body = (await response.json()) as ModelBody;
    expect(response.status, JSON.stringify(body)).toBe(201);
    expect(body.model).toMatchObject({
      inputShape: [4],
      outputUnits: 3,
      outputActivation: "softmax",
      parameters: 4 * 8 + 8 + 8 * 3 + 3,
    });

    const id = body.model.sha256;
    const modelJson = await callRoute(fileRoute, `/api/v1/models/${id}/model.json`, {
      params: { sha256: id, file: "model.json" },
    });
    expect(modelJson.status).toBe(200);
    const jsonBytes = new Uint8Array(await modelJson.arrayBuffer());
    expect(sha256(jsonBytes)).toBe(id);
    const manifest = (
      JSON.parse(new TextDecoder().decode(jsonBytes)) as { weightsManifest: { paths: string[] }[] }
    ).weightsManifest;
    const weightsName = manifest[0]?.paths[0] ?? "";
    expect(weightsName).toBe(`weights-${sha256(file("weights.bin"))}.bin`);
    const weights = await callRoute(fileRoute, `/api/v1/models/${id}/${weightsName}`, {
      params: { sha256: id, file: weightsName },
    });
    expect(new Uint8Array(await weights.arrayBuffer())).toEqual(file("weights.bin"));
    expect(weights.headers.get("cache-control")).toContain("immutable");

    const summary = await callRoute(summaryRoute, `/api/v1/models/${id}`, { params: { sha256: id } });
    expect(((await summary.json()) as ModelBody).model.sha256).toBe(id);
    // The same model again is the same content: the same id.
    expect(((await (await post(saved.files)).json()) as ModelBody).model.sha256).toBe(id);
  });

  it("serves nothing but a stored model's two files", async () => {
    const id = ((await (await post(saved.files)).json()) as ModelBody).model.sha256;
    for (const name of ["../model.json", "manifest.json", "weights.bin"]) {
      const response = await callRoute(fileRoute, "/x", { params: { sha256: id, file: name } });
      expect(response.status, name).toBe(404);
    }
    const unknown = "0".repeat(64);
    expect(
      (await callRoute(fileRoute, "/x", { params: { sha256: unknown, file: "model.json" } })).status,
    ).toBe(404);
    expect((await callRoute(summaryRoute, "/x", { params: { sha256: "not-a-hash" } })).status).toBe(404);
  });

  type Files = { name: string; bytes: Uint8Array }[];
  it.each<[string, () => Files, string, RegExp]>([
    [
      "malformed JSON",
      () => [{ name: "model.json", bytes: new TextEncoder().encode("{ not json") }],
      "model.json",
      /is not valid JSON/,
    ],
    [
      "an unknown layer",
      () =>
        withJson((json) => {
          const topology = json.modelTopology as { config: { layers: { class_name: string }[] } };
          const last = topology.config.layers.at(-1);
          if (last) last.class_name = "CapsuleLayer";
        }),
      "model.json",
      /is a CapsuleLayer, which Barnraise cannot train/,
    ],
    [
      "weights that do not match the manifest",
      () => [
        { name: "model.json", bytes: file("model.json") },
        { name: "weights.bin", bytes: file("weights.bin").slice(0, 200) },
      ],
      "weights.bin",
      /holds 200 bytes, but the weights the manifest lists for it need 268/,
    ],
    [
      "a missing weights file",
      () => [{ name: "model.json", bytes: file("model.json") }],
      "weights.bin",
      /was not uploaded/,
    ],
    [
      "no model.json",
      () => [{ name: "weights.bin", bytes: file("weights.bin") }],
      "model.json",
      /choose the model\.json/,
    ],
  ])("refuses %s, naming the file", async (_what, files, path, message) => {
    const response = await post(files());
    const body = (await response.json()) as ErrorBody;
    expect(response.status).toBe(400);
    expect(body.error.code).toBe("INVALID_INPUT");
    expect(body.error.issues?.[0]?.path).toBe(path);
    expect(body.error.issues?.[0]?.message).toMatch(message);
  });

  it("refuses an oversized upload before reading it, and anyone not signed in", async () => {
    const oversized = await callRoute(uploadRoute, "/api/v1/models", {
      method: "POST",
      body: new Uint8Array(16),
      cookie: organizer.cookie,
      headers: {
        "content-type": "multipart/form-data; boundary=x",
        "content-length": String(
          LAYERS_MODEL_LIMITS.weightBytes + LAYERS_MODEL_LIMITS.modelJsonBytes + (2 << 20),
        ),
      },
    });
    expect(oversized.status).toBe(413);
    const anonymous = await post(saved.files, "anonymous");
    expect(anonymous.status).toBe(401);
    const notMultipart = await callRoute(uploadRoute, "/api/v1/models", {
      method: "POST",
      body: { files: [] },
      cookie: organizer.cookie,
    });
    expect(notMultipart.status).toBe(415);
  });

  describe("publishing a run over an uploaded model", () => {
    let modelSha: string;

    beforeAll(async () => {
      modelSha = ((await (await post(saved.files)).json()) as ModelBody).model.sha256;
      await tabularDataset(app.dataDir, "flowers", { features: 4, classes: ["a", "b", "c"] });
      await tabularDataset(app.dataDir, "wide", { features: 6, classes: ["a", "b", "c"] });
      await tabularDataset(app.dataDir, "pairs", { features: 4, classes: ["yes", "no"] });
      await tabularDataset(app.dataDir, "prices", { features: 4, classes: null });
      await tabularDataset(app.dataDir, "single", { features: 4, classes: ["only"] });
      await imageDataset(app.dataDir, "photos", {
        width: 4,
        height: 4,
        channels: 3,
        classes: ["a", "b", "c"],
      });
      await textDataset(app.dataDir, "stories", 100);
      await textDataset(app.dataDir, "big-vocab", 5000);
    });

    const create = (id: string, model: Record<string, unknown>, dataset: string) =>
      publish(id, { kind: "uploaded", ...model }, dataset);

    it("publishes a run whose model fits its dataset, with the model's hash in the config", async () => {
      const created = await create(`fits-${provider}`, { sha256: modelSha }, "flowers");
      expect(created.status, JSON.stringify(created.body)).toBe(201);
      expect(created.body.config).toMatchObject({
        model: { kind: "uploaded", sha256: modelSha, loss: "sparse-categorical-crossentropy" },
        dataset: { name: "flowers" },
      });
    });

    it.each([
      [
        "an unknown model",
        { sha256: "f".repeat(64) },
        "flowers",
        "config.model.sha256",
        /no uploaded model has this SHA-256/,
      ],
      ["an unknown dataset", {}, "nowhere", "config.dataset.name", /does not exist/],
      ["a preset's dataset", {}, "mnist", "config.dataset.name", /does not exist|tabular/],
      ["too many features", {}, "wide", "config.model.sha256", /takes 4 inputs .*wide has 6 feature columns/],
      ["too few classes", {}, "pairs", "config.model.sha256", /has 3 units; pairs has 2 classes/],
      ["a single class", {}, "single", "config.dataset.name", /has 1 class; classification needs at least 2/],
      ["a regression label", {}, "prices", "config.model.task", /is a number to regress on/],
      [
        "regression on a softmax",
        { task: "regression" },
        "prices",
        "config.model.sha256",
        /needs one output unit/,
      ],
      [
        "images of another size than the input",
        {},
        "photos",
        "config.model.sha256",
        /takes 4 inputs .*photos's images are 4×4×3 \(48 values\)/,
      ],
      ["a regression on images", { task: "regression" }, "photos", "config.model.task", /labels are classes/],
      ["a text dataset", {}, "stories", "config.dataset.name", /not tokens-u16le/],
    ])("refuses %s with the field named", async (what, model, dataset, path, message) => {
      const created = await create(
        `misfit-${what.replace(/\W+/g, "-")}-${provider}`.slice(0, 60),
        { sha256: modelSha, ...model },
        dataset,
      );
      expect(created.status, JSON.stringify(created.body)).toBe(400);
      const issue = created.body.error.issues?.find((entry) => entry.path === path);
      expect(issue?.message, JSON.stringify(created.body.error.issues)).toMatch(message);
    });
  });

  describe("an uploaded language model on an imported text", () => {
    const shas: Record<string, string> = {};

    /** Uploads `layers` (after an Embedding over `positions` ids, or none) as a Sequential model. */
    async function upload(name: string, layers: tf.layers.Layer[]): Promise<void> {
      await tf.setBackend("cpu");
      const model = tf.sequential({ layers });
      try {
        const files = (await saveModelFiles(model)).files;
        const response = await post(files);
        expect(response.status).toBe(201);
        shas[name] = ((await response.json()) as ModelBody).model.sha256;
      } finally {
        model.dispose();
      }
    }
    const embedding = (inputDim: number, positions = 8) =>
      tf.layers.embedding({ inputDim, outputDim: 4, inputLength: positions });
    const output = (units: number) => tf.layers.dense({ units, activation: "softmax" });

    beforeAll(async () => {
      await textDataset(app.dataDir, "poems", 100);
      await textDataset(app.dataDir, "huge-vocab", 5000);
      await tabularDataset(app.dataDir, "tables", { features: 4, classes: ["a", "b", "c"] });
      shas.classifier = ((await (await post(saved.files)).json()) as ModelBody).model.sha256;
      await upload("lm", [embedding(100), output(100)]);
      await upload("short", [embedding(100, 2), output(100)]);
      await upload("narrow-embedding", [embedding(50), output(100)]);
      await upload("pooled", [embedding(100), tf.layers.globalAveragePooling1d(), output(100)]);
      await upload("last-state", [embedding(100), tf.layers.lstm({ units: 4 }), output(100)]);
      const conv = (padding: "same" | "valid") =>
        tf.layers.conv1d({ filters: 4, kernelSize: 3, padding, activation: "relu" });
      await upload("centred", [embedding(100), conv("same"), output(100)]);
      await upload("shortening", [embedding(100), conv("valid"), output(100)]);
      await upload("backwards", [
        embedding(100),
        tf.layers.gru({ units: 4, returnSequences: true, goBackwards: true }),
        output(100),
      ]);
      await upload("sequences", [
        embedding(100),
        tf.layers.lstm({ units: 4, returnSequences: true }),
        output(100),
      ]);
    });

    const createUploadedLm = (id: string, model: string, task: string, dataset: string) =>
      publish(id, { kind: "uploaded", sha256: shas[model], task }, dataset);

    it.each([
      ["next-token", "lm"],
      ["masked-tokens", "lm"],
      ["next-token", "sequences"],
      ["masked-tokens", "centred"],
      ["masked-tokens", "backwards"],
    ])(
      "publishes a %s run of a model (%s) that predicts the text's vocabulary at every position",
      async (task, model) => {
        const created = await createUploadedLm(`ulm-${task}-${model}-${provider}`, model, task, "poems");
        expect(created.status, JSON.stringify(created.body)).toBe(201);
        expect(created.body.config).toMatchObject({
          model: { kind: "uploaded", task, loss: "sparse-categorical-crossentropy", metrics: ["perplexity"] },
          dataset: { name: "poems" },
        });
      },
    );

    it.each([
      [
        "a table",
        "lm",
        "next-token",
        "tables",
        "config.dataset.name",
        /next-token model trains on a text dataset, not tabular-f32/,
      ],
      [
        "a larger vocabulary",
        "lm",
        "next-token",
        "huge-vocab",
        "config.model.sha256",
        /output layer has 100 units; huge-vocab's vocabulary has 5000 tokens/,
      ],
      [
        "a narrow Embedding",
        "narrow-embedding",
        "next-token",
        "poems",
        "config.model.sha256",
        /Embedding .* takes 50 token ids; poems's vocabulary has 100/,
      ],
      [
        "pooling",
        "pooled",
        "next-token",
        "poems",
        "config.model.sha256",
        /GlobalAveragePooling1D layer .* drops the sequence axis/,
      ],
      [
        "a recurrent layer's last state",
        "last-state",
        "masked-tokens",
        "poems",
        "config.model.sha256",
        /LSTM layer .* drops the sequence axis/,
      ],
      [
        "a masked model of 2 positions",
        "short",
        "masked-tokens",
        "poems",
        "config.model.sha256",
        /at least 3 positions, not 2/,
      ],
      [
        "a classifier's input",
        "classifier",
        "next-token",
        "poems",
        "config.model.sha256",
        /output layer has 3 units/,
      ],
      [
        "a centred window predicting the next token",
        "centred",
        "next-token",
        "poems",
        "config.model.sha256",
        /Conv1D layer .* lets each position see the 1 token\(s\) after it/,
      ],
      [
        "a window that shortens the sequence",
        "shortening",
        "masked-tokens",
        "poems",
        "config.model.sha256",
        /Conv1D layer .* shortens the sequence \(window 3, strides 1, padding valid\)/,
      ],
      [
        "a backwards recurrent layer predicting the next token",
        "backwards",
        "next-token",
        "poems",
        "config.model.sha256",
        /GRU layer .* reads the sequence backwards/,
      ],
    ])("refuses %s with the field named", async (what, model, task, dataset, path, message) => {
      const created = await createUploadedLm(
        `ulm-${what.replace(/\W+/g, "-")}-${provider}`.slice(0, 60),
        model,
        task,
        dataset,
      );
      expect(created.status, JSON.stringify(created.body)).toBe(400);
      const issue = created.body.error.issues?.find((entry) => entry.path === path);
      expect(issue?.message, JSON.stringify(created.body.error.issues)).toMatch(message);
    });
  });

  describe("the masked LM on an imported text", () => {
    const createLm = (id: string, dataset: string, vocabSize?: number) =>
      publish(id, { kind: "albert-mlm", ...(vocabSize ? { vocabSize } : {}) }, dataset);

    it("publishes a run over a text dataset the model's vocabulary holds", async () => {
      const created = await createLm(`lm-text-${provider}`, "stories");
      expect(created.status, JSON.stringify(created.body)).toBe(201);
      expect(created.body.config).toMatchObject({
        model: { kind: "albert-mlm" },
        dataset: { name: "stories" },
      });
    });

    it.each([
      ["a table", "flowers", undefined, "config.dataset.name", /trains on a text dataset, not tabular-f32/],
      ["a missing dataset", "nowhere", undefined, "config.dataset.name", /does not exist/],
      [
        "a vocabulary larger than the model's",
        "big-vocab",
        4096,
        "config.model.vocabSize",
        /vocabulary has 5000 tokens; the model embeds 4096/,
      ],
    ])("refuses %s", async (what, dataset, vocabSize, path, message) => {
      const created = await createLm(
        `lm-${what.replace(/\W+/g, "-")}-${provider}`.slice(0, 60),
        dataset,
        vocabSize,
      );
      expect(created.status, JSON.stringify(created.body)).toBe(400);
      const issue = created.body.error.issues?.find((entry) => entry.path === path);
      expect(issue?.message, JSON.stringify(created.body.error.issues)).toMatch(message);
    });
  });
});

/** Stores `manifest` where the platform looks for the dataset's. */
async function writeDataset(dataDir: string, manifest: DatasetManifest): Promise<void> {
  const dir = join(dataDir, "datasets", manifest.name);
  await mkdir(dir, { recursive: true });
  await writeManifestFile(dir, manifest);
}

/** The fields every fit-check manifest shares: no shards (publishing reads only the manifest). */
function emptyDataset(name: string, extension: string) {
  return {
    name,
    formatVersion: 1 as const,
    description: `${name} for the fit checks`,
    createdFrom: { upload: `${name}.${extension}`, bytes: 0, sha256: "0".repeat(64) },
    splits: { train: { records: 0, bytes: 0, shards: 0 }, test: { records: 0, bytes: 0, shards: 0 } },
    shards: [],
  };
}

/** A tabular dataset's manifest (no shards: publishing reads only the manifest). */
async function tabularDataset(
  dataDir: string,
  name: string,
  shape: { features: number; classes: string[] | null },
): Promise<void> {
  const manifest: TabularManifest = {
    ...emptyDataset(name, "csv"),
    format: "tabular-f32",
    options: { recordsPerShard: 1000, testEvery: 10 },
    record: {
      bytes: 4 * (shape.features + 1),
      features: {
        count: shape.features,
        names: Array.from({ length: shape.features }, (_, i) => `f${i}`),
        dtype: "float32",
      },
      label: {
        name: "label",
        dtype: "float32",
        kind: shape.classes === null ? "value" : "class",
        classes: shape.classes,
      },
    },
  };
  await writeDataset(dataDir, manifest);
}

/** An image dataset's manifest (no shards). */
async function imageDataset(
  dataDir: string,
  name: string,
  shape: { width: number; height: number; channels: 1 | 3; classes: string[] },
): Promise<void> {
  const pixels = shape.width * shape.height * shape.channels;
  const manifest: ImageManifest = {
    ...emptyDataset(name, "zip"),
    format: "image-u8",
    options: { recordsPerShard: 1000, testEvery: 10, fit: "cover" },
    record: {
      bytes: pixels + 2,
      image: {
        offset: 0,
        width: shape.width,
        height: shape.height,
        channels: shape.channels,
        dtype: "uint8",
        layout: "hwc",
      },
      label: { offset: pixels, dtype: "uint16le", classes: shape.classes },
    },
  };
  await writeDataset(dataDir, manifest);
}

/** A text dataset's manifest (no shards) with a vocabulary of `size` tokens. */
async function textDataset(dataDir: string, name: string, size: number): Promise<void> {
  const manifest: TokenManifest = {
    ...emptyDataset(name, "txt"),
    format: "tokens-u16le",
    options: { recordsPerShard: 1000, limit: null, vocabSize: size },
    record: { length: "uint16le", token: "uint16le", maxTokens: 10 },
    vocabulary: {
      file: "vocab.txt",
      size,
      bytes: 0,
      sha256: "0".repeat(64),
      lowercase: true,
      specialTokens: { pad: 0, unk: 1, cls: 2, sep: 3, mask: 4 },
    },
  };
  await writeDataset(dataDir, manifest);
}
