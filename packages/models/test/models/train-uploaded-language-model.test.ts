import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as layers from "@tensorflow/tfjs";
import * as tf from "@tensorflow/tfjs-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createBatchStream } from "../../src/data/batch-stream.ts";
import { HttpDatasetSource } from "../../src/data/http-dataset-source.ts";
import { loadModel } from "../../src/models/model-kinds.ts";
import type { TrainableModel } from "../../src/models/trainable-model.ts";
import { selectNodeBackend } from "../../src/node/node-backends.ts";
import { ensureBackendTrains } from "../../src/tf/backend-kernels.ts";
import { evaluateModel } from "../../src/evaluation/evaluate.ts";
import { heldOutScore } from "../../src/evaluation/held-out-evaluation.ts";
import { syntheticBatch } from "../../src/data/synthetic-batch.ts";
import { type DatasetServer, serveDataset, SPECIALS, textDataset } from "../data/dataset-fixture.ts";
import { layersConfig, type ModelServer, serveModels, storeModel } from "./layers-fixture.ts";
import { directoryStore } from "../../src/node/directory-store.ts";
import { modelKindOf } from "../../src/models/model-kinds.ts";

/**
 * Uploaded language models (`next-token`, `masked-tokens`) on one peer over real HTTP: a Keras-style
 * model saved by TF.js, a text dataset in the platform's `tokens-u16le` format, gradient steps, and
 * the held-out perplexity. The text counts: each sentence runs up from a random ordinary token, so
 * a token's successor (and a hidden token's neighbours) tell what it is.
 */

const VOCAB = 24;
const ORDINARY = VOCAB - 5;
const POSITIONS = 8;

/** Sentence i: 3…6 consecutive ordinary tokens (wrapping), from one picked by i. */
function counting(i: number, split: string): number[] {
  const start = (i * 7 + (split === "test" ? 3 : 0)) % ORDINARY;
  const length = 3 + (i % 4);
  return Array.from({ length }, (_, k) => 5 + ((start + k) % ORDINARY));
}

const text = textDataset({
  name: "counting",
  vocabSize: VOCAB,
  train: 400,
  test: 60,
  recordsPerShard: 100,
  maxTokens: 6,
  sentence: counting,
});

function embedding(inputDim = VOCAB): layers.layers.Layer {
  return layers.layers.embedding({
    inputDim,
    outputDim: 12,
    inputLength: POSITIONS,
    embeddingsInitializer: layers.initializers.randomUniform({ minval: -0.1, maxval: 0.1, seed: 11 }),
  });
}

function output(units = VOCAB): layers.layers.Layer {
  return layers.layers.dense({
    units,
    activation: "softmax",
    kernelInitializer: layers.initializers.glorotUniform({ seed: 12 }),
  });
}

/** Embedding → Dense(vocabulary) at each position: the next token from the current one. */
function bigramModel(options: { inputDim?: number } = {}): layers.LayersModel {
  const model = layers.sequential();
  model.add(embedding(options.inputDim));
  model.add(output());
  return model;
}

/** Embedding → Conv1D over 3 positions → Dense(vocabulary): a hidden token from its neighbours. */
function neighbourModel(): layers.LayersModel {
  const model = layers.sequential();
  model.add(embedding());
  model.add(
    layers.layers.conv1d({
      filters: 24,
      kernelSize: 3,
      padding: "same",
      activation: "tanh",
      kernelInitializer: layers.initializers.glorotUniform({ seed: 13 }),
    }),
  );
  model.add(output());
  return model;
}

let dataDir: string;
let data: DatasetServer;

beforeAll(async () => {
  await selectNodeBackend("cpu");
  await selectNodeBackend("wasm");
  dataDir = await mkdtemp(join(tmpdir(), "barnraise-train-lm-"));
  data = await serveDataset(text);
});

afterAll(async () => {
  await data.close();
  await rm(dataDir, { recursive: true, force: true });
});

/** Loads the stored `model` for `task`, runs `body`, and frees everything. */
async function withModel(
  model: layers.LayersModel,
  task: "next-token" | "masked-tokens",
  body: (loaded: TrainableModel, config: ReturnType<typeof layersConfig>) => Promise<void> | void,
): Promise<void> {
  const stored = await storeModel(model);
  const models: ModelServer = await serveModels([stored]);
  const config = layersConfig(stored.sha256, { task }, "counting");
  const loaded = await loadModel(config.model, {
    server: new URL(models.url),
    cache: directoryStore(join(dataDir, "models")),
  });
  try {
    await body(loaded, config);
  } finally {
    loaded.dispose();
    await models.close();
  }
}

/** Batches of the counting text for `model`, over HTTP as a peer reads them. */
function countingBatches(
  model: TrainableModel,
  config: ReturnType<typeof layersConfig>,
  split: "train" | "test",
  batchSize: number,
  seed: number,
) {
  const source = new HttpDatasetSource({ serverUrl: data.url, dataset: "counting" });
  return createBatchStream({ source, split, batchSize, seed, config, kind: model.kind });
}

/** 150 steps of plain SGD at rate 0.5 on batches of 16; the held-out evaluation before and after. */
async function train(model: TrainableModel, config: ReturnType<typeof layersConfig>) {
  const test = () => countingBatches(model, config, "test", 20, 4);
  let theta = model.initialParameters(0);
  const before = await evaluateModel(model, theta, test());
  let step = 0;
  for await (const batch of countingBatches(model, config, "train", 16, 4)) {
    model.setParameters(theta);
    const { gradient, samples } = await model.computeGradients(batch, step);
    expect(samples).toBe(16);
    theta = theta.map((value, i) => value - 0.5 * (gradient[i] ?? 0));
    if (++step === 150) break;
  }
  return { before, after: await evaluateModel(model, theta, test()) };
}

describe("an uploaded next-token model", () => {
  it("learns each token's successor, and its held-out perplexity falls far below the vocabulary's", async () => {
    await tf.setBackend("cpu");
    await withModel(bigramModel(), "next-token", async (model, config) => {
      expect(config.model).toMatchObject({ task: "next-token", metrics: ["perplexity"] });
      expect(model.uploaded).toMatchObject({
        inputShape: [POSITIONS],
        features: POSITIONS,
        outputUnits: VOCAB,
      });
      const { before, after } = await train(model, config);
      // Every token of the 60 test sentences is predicted, and [SEP] after the last: 3…6 + 1 each.
      const predicted = Array.from({ length: 60 }, (_, i) => counting(i, "test").length + 1);
      expect(after.predictions).toBe(predicted.reduce((a, b) => a + b, 0));
      // Untrained, the model guesses about uniformly over 24 tokens.
      expect(Math.exp(before.loss)).toBeGreaterThan(15);
      // The first token of a sentence is a guess among 19, the rest follow from the one before.
      expect(Math.exp(after.loss)).toBeLessThan(6);
      expect(after.accuracy).toBeGreaterThan(0.5);
      expect(after.metrics?.perplexity).toBeCloseTo(Math.exp(after.loss), 4);
      const score = heldOutScore(config.model, after);
      expect(score).toMatchObject({ metric: "perplexity", samples: after.predictions });
      expect(score.value).toBeCloseTo(Math.exp(after.loss), 6);
    });
  });

  it("moves from wasm to cpu, which can differentiate the Embedding, and trains there", async () => {
    await tf.setBackend("wasm");
    await withModel(bigramModel(), "next-token", async (model, config) => {
      const warnings: string[] = [];
      const backend = await ensureBackendTrains(model, (message) => warnings.push(message));
      // TF.js differentiates a gather (the Embedding's lookup) with UnsortedSegmentSum, which wasm lacks.
      expect(backend).toBe("cpu");
      expect(warnings).toEqual([
        "the wasm backend has no UnsortedSegmentSum kernel, which training this model needs; " +
          "training on the cpu backend instead (slower)",
      ]);
      const batch = syntheticBatch(modelKindOf(config.model, model.uploaded), 3, 1);
      expect(batch.kind).toBe("next-tokens");
      const { loss } = await model.computeGradients(batch, 0);
      expect(Number.isFinite(loss)).toBe(true);
    });
  });
});

describe("an uploaded masked-tokens model", () => {
  it("learns hidden tokens from their neighbours", async () => {
    await tf.setBackend("cpu");
    await withModel(neighbourModel(), "masked-tokens", async (model, config) => {
      const { before, after } = await train(model, config);
      expect(Math.exp(before.loss)).toBeGreaterThan(15);
      expect(Math.exp(after.loss)).toBeLessThan(Math.exp(before.loss) / 3);
      expect(after.accuracy).toBeGreaterThan(0.8);
    });
  });

  it("draws the held-out masks from the seed, so two evaluations of one state agree", async () => {
    await tf.setBackend("cpu");
    await withModel(neighbourModel(), "masked-tokens", async (model, config) => {
      const test = () => countingBatches(model, config, "test", 20, 9);
      const theta = model.initialParameters(0);
      const [first, second] = [
        await evaluateModel(model, theta, test()),
        await evaluateModel(model, theta, test()),
      ];
      expect(second).toEqual(first);
      // [CLS] and [SEP] are never hidden: only the sentences' 3…6 tokens are predicted.
      expect(first.predictions).toBeGreaterThanOrEqual(60);
      expect(first.predictions).toBeLessThan(60 * 6);
    });
  });
});

describe("refusals", () => {
  it("refuses a language-model task for a model whose output has no sequence axis", async () => {
    await tf.setBackend("cpu");
    const pooled = layers.sequential();
    pooled.add(embedding());
    pooled.add(layers.layers.globalAveragePooling1d());
    pooled.add(output());
    const stored = await storeModel(pooled);
    const models = await serveModels([stored]);
    try {
      const config = layersConfig(stored.sha256, { task: "next-token" }, "counting");
      await expect(
        loadModel(config.model, {
          server: new URL(models.url),
          cache: directoryStore(join(dataDir, "models")),
        }),
      ).rejects.toThrow(/a language model's must be \[batch, 8, vocabulary\]/);
    } finally {
      await models.close();
    }
  });

  it("refuses a text whose ids the Embedding cannot read", async () => {
    await tf.setBackend("cpu");
    await withModel(bigramModel({ inputDim: VOCAB - 4 }), "next-token", async (model, config) => {
      expect(model.uploaded).toMatchObject({ tokenIds: VOCAB - 4, outputUnits: VOCAB });
      const batches = countingBatches(model, config, "test", 4, 1);
      await expect(batches.next()).rejects.toThrow(
        /vocabulary has 24 tokens but the model embeds only 20; import the text with a vocabulary size of at most 20 \(the ids its Embedding reads\)/,
      );
    });
  });

  it("refuses a next-token model that sees later tokens, and takes one that reads forward", async () => {
    await tf.setBackend("cpu");
    const withMiddle = (middle: layers.layers.Layer) => {
      const model = layers.sequential();
      model.add(embedding());
      model.add(middle);
      model.add(output());
      return model;
    };
    const convolution = await storeModel(
      withMiddle(layers.layers.conv1d({ filters: 8, kernelSize: 3, padding: "same", activation: "tanh" })),
    );
    const backwards = await storeModel(
      withMiddle(layers.layers.simpleRNN({ units: 8, returnSequences: true, goBackwards: true })),
    );
    const forwards = await storeModel(
      withMiddle(layers.layers.simpleRNN({ units: 8, returnSequences: true })),
    );
    const models = await serveModels([convolution, backwards, forwards]);
    try {
      const server = new URL(models.url);
      const nextToken = (sha: string) => layersConfig(sha, { task: "next-token" }, "counting").model;
      await expect(
        loadModel(nextToken(convolution.sha256), { server, cache: directoryStore(join(dataDir, "models")) }),
      ).rejects.toThrow(/its prediction at position 0 changes with the token at position 1, a later one/);
      await expect(
        loadModel(nextToken(backwards.sha256), { server, cache: directoryStore(join(dataDir, "models")) }),
      ).rejects.toThrow(/changes with the token at position \d+, a later one/);
      (
        await loadModel(nextToken(forwards.sha256), {
          server,
          cache: directoryStore(join(dataDir, "models")),
        })
      ).dispose();
      // Seeing both sides is what a masked model is for.
      const masked = layersConfig(convolution.sha256, { task: "masked-tokens" }, "counting").model;
      (await loadModel(masked, { server, cache: directoryStore(join(dataDir, "models")) })).dispose();
    } finally {
      await models.close();
    }
  });

  it("refuses a text whose vocabulary is larger than the model's output, and a table for a language model", async () => {
    await tf.setBackend("cpu");
    const small = layers.sequential();
    small.add(embedding(16));
    small.add(output(16));
    await withModel(small, "next-token", async (model, config) => {
      const batches = countingBatches(model, config, "test", 4, 1);
      await expect(batches.next()).rejects.toThrow(
        /vocabulary has 24 tokens but the model embeds only 16; import the text with a vocabulary size of at most 16/,
      );
    });
    await withModel(bigramModel(), "masked-tokens", (model, config) => {
      if (config.model.kind !== "uploaded") throw new Error("not an uploaded model");
      // A batch of the other language-model kind is refused before it reaches TF.js.
      const wrong = syntheticBatch(
        modelKindOf({ ...config.model, task: "next-token" }, model.uploaded),
        2,
        0,
      );
      expect(() => model.computeGradients(wrong, 0)).toThrow(
        /trains on "masked-tokens" batches, got a "next-tokens" batch/,
      );
      const cells = 2 * POSITIONS;
      const outOfRange = {
        kind: "masked-tokens",
        size: 2,
        sequenceLength: POSITIONS,
        inputIds: new Int32Array(cells).fill(VOCAB),
        labels: new Int32Array(cells).fill(-1),
        attentionMask: new Float32Array(cells).fill(1),
      } as const;
      expect(() => model.computeGradients(outOfRange, 0)).toThrow(
        /inputIds\[0\] is 24; token ids must be 0…23/,
      );
      const nothing = { ...outOfRange, inputIds: new Int32Array(cells).fill(SPECIALS.pad) };
      expect(() => model.computeGradients(nothing, 0)).toThrow(/no token to predict/);
    });
  });
});
