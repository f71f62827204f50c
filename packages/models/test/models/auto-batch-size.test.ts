import * as tf from "@tensorflow/tfjs-core";
import "@tensorflow/tfjs-backend-cpu";
import { type ModelConfig, parseExperimentConfig } from "@barnraise/protocol";
import { ParameterLayout } from "@barnraise/swarm";
import { beforeAll, describe, expect, it } from "vitest";
import type { AlbertMlmConfig } from "../../src/models/albert-parameters.ts";
import type { Batch } from "../../src/models/batch.ts";
import { checkImageBatch, checkMaskedTokenBatch } from "../../src/models/batch-checks.ts";
import { createModel } from "../../src/models/model-kinds.ts";
import type { GradientResult, TrainableModel } from "../../src/models/trainable-model.ts";
import {
  type ChooseBatchSizeOptions,
  chooseBatchSize,
  resolveBatchSize,
} from "../../src/models/auto-batch-size.ts";
import { syntheticBatch } from "../../src/data/synthetic-batch.ts";
import { modelKindOf } from "../../src/models/model-kinds.ts";

beforeAll(async () => {
  await tf.setBackend("cpu");
});

const mlpConfig: ModelConfig = { kind: "mnist-mlp", hiddenUnits: [128, 64], activation: "relu" };

const tinyAlbert: AlbertMlmConfig = {
  kind: "albert-mlm",
  vocabSize: 64,
  embeddingSize: 8,
  hiddenSize: 8,
  numLayers: 2,
  numHeads: 2,
  intermediateSize: 16,
  maxSequenceLength: 8,
  maskProbability: 0.25,
  dropout: 0.1,
};

/**
 * A model whose steps cost `fixedMs + perSampleMs · size` on a fake clock, plus `warmupMs` on the
 * first step at each size; it records the sizes it was called with, and whether a macrotask queued
 * before the search had run by then.
 */
class FakeModel implements TrainableModel {
  readonly config = mlpConfig;
  readonly kind = modelKindOf(mlpConfig);
  readonly layout = new ParameterLayout([{ name: "w", offset: 0, length: 1 }]);
  readonly calls: { size: number; immediateRan: boolean }[] = [];
  time = 0;
  immediateRan = false;
  readonly #cost: (size: number) => number;
  readonly #warmupMs: number;
  readonly #spikeMs: number;

  /** `spikeMs` slows the second timed step at each size (as a garbage collection would). */
  constructor(cost: (size: number) => number, warmupMs = 0, spikeMs = 0) {
    this.#cost = cost;
    this.#warmupMs = warmupMs;
    this.#spikeMs = spikeMs;
  }

  readonly now = (): number => this.time;

  computeGradients(batch: Batch, _seed: number): Promise<GradientResult> {
    const earlier = this.calls.filter((call) => call.size === batch.size).length;
    this.calls.push({ size: batch.size, immediateRan: this.immediateRan });
    const extraMs = earlier === 0 ? this.#warmupMs : earlier === 2 ? this.#spikeMs : 0;
    this.time += this.#cost(batch.size) + extraMs;
    return Promise.resolve({ loss: 1, samples: batch.size, gradient: new Float32Array(1) });
  }

  initialParameters(): Float32Array {
    return new Float32Array(1);
  }
  setParameters(): void {}
  evaluate(): never {
    throw new Error("not used");
  }
  dispose(): void {}

  sizesTried(): number[] {
    return [...new Set(this.calls.map((call) => call.size))];
  }
}

const linear =
  (fixedMs: number, perSampleMs: number) =>
  (size: number): number =>
    fixedMs + perSampleMs * size;

function choose(model: FakeModel, options: Partial<ChooseBatchSizeOptions> = {}) {
  return chooseBatchSize({
    model,
    targetBatchSize: 1_000_000,
    memoryBytes: Number.POSITIVE_INFINITY,
    now: model.now,
    ...options,
  });
}

describe("chooseBatchSize", () => {
  it("doubles until a step exceeds the time budget and keeps the fastest size within it", async () => {
    // 100 ms overhead + 1 ms per sample: throughput keeps rising; 256 takes 356 ms > 250.
    const model = new FakeModel(linear(100, 1));
    const choice = await choose(model);
    expect(choice.trials.map((trial) => trial.batchSize)).toEqual([8, 16, 32, 64, 128, 256]);
    expect(choice.batchSize).toBe(128);
    expect(choice.limitedBy).toBe("time");
    expect(choice.trials[4]).toEqual({ batchSize: 128, stepMs: 228, samplesPerSecond: (128 * 1000) / 228 });
    expect(choice.samplesPerSecond).toBeCloseTo((128 * 1000) / 228, 9);
  });

  it("takes a larger budget into account", async () => {
    const model = new FakeModel(linear(100, 1));
    const choice = await choose(model, { stepBudgetMs: 400 });
    expect(choice.batchSize).toBe(256);
    expect(choice.limitedBy).toBe("time");
  });

  it("takes the median of three timed steps after an untimed warm-up", async () => {
    const model = new FakeModel(linear(100, 1), 10_000, 500);
    const choice = await choose(model);
    expect(choice.batchSize).toBe(128);
    expect(choice.trials.map((trial) => trial.stepMs)).toEqual([108, 116, 132, 164, 228, 356]);
    expect(model.calls.filter((call) => call.size === 8)).toHaveLength(4);
  });

  it("falls back to the first size when even it is over budget", async () => {
    const model = new FakeModel(linear(1000, 1));
    const choice = await choose(model);
    expect(choice.trials.map((trial) => trial.batchSize)).toEqual([8]);
    expect(choice).toMatchObject({ batchSize: 8, limitedBy: "time" });
  });

  it("stops at the memory cap and tries the cap itself when it is not a power of two", async () => {
    const model = new FakeModel(linear(100, 1));
    const memoryBytes = 40 * modelKindOf(mlpConfig).bytesPerSample + 1;
    const choice = await choose(model, { memoryBytes });
    expect(choice.trials.map((trial) => trial.batchSize)).toEqual([8, 16, 32, 40]);
    expect(choice).toMatchObject({ batchSize: 40, limitedBy: "memory" });
  });

  it("tries size 1 when not even one sample fits the memory estimate", async () => {
    const model = new FakeModel(linear(100, 1));
    const choice = await choose(model, { memoryBytes: 0 });
    expect(choice).toMatchObject({ batchSize: 1, limitedBy: "memory" });
    expect(model.sizesTried()).toEqual([1]);
  });

  it("caps at a quarter of the target batch size", async () => {
    const model = new FakeModel(linear(100, 1));
    const choice = await choose(model, { targetBatchSize: 256 });
    expect(choice.trials.map((trial) => trial.batchSize)).toEqual([8, 16, 32, 64]);
    expect(choice).toMatchObject({ batchSize: 64, limitedBy: "target" });

    const small = await choose(new FakeModel(linear(100, 1)), { targetBatchSize: 13 });
    expect(small.trials.map((trial) => trial.batchSize)).toEqual([3]);
    expect(small).toMatchObject({ batchSize: 3, limitedBy: "target" });
  });

  it("caps at maxBatchSize", async () => {
    const model = new FakeModel(linear(100, 1));
    const choice = await choose(model, { maxBatchSize: 16 });
    expect(choice).toMatchObject({ batchSize: 16, limitedBy: "max" });
    expect(model.sizesTried()).toEqual([8, 16]);
  });

  it("stops when doubling brings less than 10 % more samples per second", async () => {
    // 10 ms + 1 ms per sample: 64 → 128 gains only 7 %.
    const model = new FakeModel(linear(10, 1));
    const choice = await choose(model);
    expect(choice.trials.map((trial) => trial.batchSize)).toEqual([8, 16, 32, 64, 128]);
    expect(choice).toMatchObject({ batchSize: 128, limitedBy: "throughput" });

    // Pure per-sample cost: no size is faster, so the smallest is kept.
    const flat = await choose(new FakeModel(linear(0, 1)));
    expect(flat.trials.map((trial) => trial.batchSize)).toEqual([8, 16]);
    expect(flat).toMatchObject({ batchSize: 8, limitedBy: "throughput" });
  });

  it("yields to the event loop between steps", async () => {
    const model = new FakeModel(linear(100, 1));
    setImmediate(() => {
      model.immediateRan = true;
    });
    model.immediateRan = false;
    await choose(model, { maxBatchSize: 8 });
    expect(model.calls.every((call) => call.immediateRan)).toBe(true);
  });

  it("stops when the signal aborts", async () => {
    const model = new FakeModel(linear(100, 1));
    const controller = new AbortController();
    const search = choose(model, { signal: controller.signal });
    controller.abort(new Error("interrupted"));
    await expect(search).rejects.toThrow("interrupted");
    expect(model.calls).toHaveLength(0);
  });

  it("rejects invalid options", async () => {
    const model = new FakeModel(linear(100, 1));
    await expect(choose(model, { targetBatchSize: 0 })).rejects.toThrow(/targetBatchSize/);
    await expect(choose(model, { memoryBytes: Number.NaN })).rejects.toThrow(/memoryBytes/);
    await expect(choose(model, { stepBudgetMs: 0 })).rejects.toThrow(/stepBudgetMs/);
    await expect(choose(model, { maxBatchSize: 2.5 })).rejects.toThrow(/maxBatchSize/);
  });

  it("leaks no tensors and leaves the parameters of a real model unchanged", async () => {
    const model = createModel({ kind: "mnist-mlp", hiddenUnits: [16], activation: "relu" });
    model.setParameters(model.initialParameters(11));
    const probe = syntheticBatch(model.kind, 16, 99);
    const before = (await model.evaluate(probe)).loss;
    const tensors = tf.memory().numTensors;
    const choice = await chooseBatchSize({
      model,
      targetBatchSize: 64,
      memoryBytes: Number.POSITIVE_INFINITY,
    });
    expect([8, 16]).toContain(choice.batchSize);
    expect(tf.memory().numTensors).toBe(tensors);
    expect((await model.evaluate(probe)).loss).toBe(before);
    model.dispose();
  });
});

describe("resolveBatchSize", () => {
  it("uses a requested size as given, capped at the target, without timing anything", async () => {
    const model = new FakeModel(linear(100, 1));
    const measure = { model, memoryBytes: 0, now: model.now };
    expect(await resolveBatchSize({ ...measure, requested: 32, targetBatchSize: 1024 })).toEqual({
      source: "requested",
      batchSize: 32,
    });
    expect(await resolveBatchSize({ ...measure, requested: 2048, targetBatchSize: 1000 })).toEqual({
      source: "requested",
      batchSize: 1000,
    });
    await expect(resolveBatchSize({ ...measure, requested: 0, targetBatchSize: 1000 })).rejects.toThrow(
      /positive integer/,
    );
    expect(model.calls).toHaveLength(0);
  });

  it('measures for "auto" with the configured target', async () => {
    const model = new FakeModel(linear(100, 1));
    const { localBatchSize, targetBatchSize } = parseExperimentConfig({
      training: { targetBatchSize: 128 },
    }).training;
    const resolved = await resolveBatchSize({
      requested: localBatchSize,
      targetBatchSize,
      model,
      memoryBytes: Number.POSITIVE_INFINITY,
      now: model.now,
    });
    expect(resolved).toMatchObject({ source: "auto", batchSize: 32, limitedBy: "target" });
    expect(resolved.samplesPerSecond).toBeCloseTo((32 * 1000) / 132, 9);
    expect(resolved.trials?.map((trial) => trial.batchSize)).toEqual([8, 16, 32]);
  });
});

describe("estimateBytesPerSample", () => {
  /** Growth of a real step's peak tensor bytes per added sample, on the cpu backend. */
  async function measuredBytesPerSample(config: ModelConfig, small: number, large: number): Promise<number> {
    const model = createModel(config);
    const peak = async (size: number): Promise<number> => {
      const batch = syntheticBatch(modelKindOf(config), size, 5);
      const base = tf.memory().numBytes;
      const profile = await tf.profile(async () => {
        await model.computeGradients(batch, 1);
      });
      return profile.peakBytes - base;
    };
    const growth = ((await peak(large)) - (await peak(small))) / (large - small);
    model.dispose();
    return growth;
  }

  it("is an upper estimate within twice the measured peak growth", async () => {
    const configs: [ModelConfig, number, number][] = [
      [{ kind: "mnist-mlp", hiddenUnits: [16], activation: "relu" }, 64, 256],
      [{ kind: "mnist-mlp", hiddenUnits: [64], activation: "gelu" }, 64, 256],
      [tinyAlbert, 4, 20],
    ];
    for (const [config, small, large] of configs) {
      const measured = await measuredBytesPerSample(config, small, large);
      const estimate = modelKindOf(config).bytesPerSample;
      expect(estimate, config.kind).toBeGreaterThanOrEqual(measured);
      expect(estimate, config.kind).toBeLessThanOrEqual(2 * measured);
    }
  });

  it("grows with the activation shapes", () => {
    const base = modelKindOf(tinyAlbert).bytesPerSample;
    for (const change of [
      { maxSequenceLength: 16 },
      { hiddenSize: 16 },
      { intermediateSize: 32 },
      { numLayers: 3 },
      { numHeads: 4 },
      { vocabSize: 128 },
      { embeddingSize: 16 },
    ]) {
      expect(
        modelKindOf({ ...tinyAlbert, ...change }).bytesPerSample,
        JSON.stringify(change),
      ).toBeGreaterThan(base);
    }
  });
});

describe("syntheticBatch", () => {
  it("builds image batches the mnist-mlp model accepts, the same for the same seed", async () => {
    const model = createModel({ kind: "mnist-mlp", hiddenUnits: [8], activation: "relu" });
    model.setParameters(model.initialParameters(1));
    const batch = syntheticBatch(model.kind, 5, 7);
    const images = checkImageBatch(batch);
    expect(images.size).toBe(5);
    expect(images.pixels.every((pixel) => pixel >= 0 && pixel < 1)).toBe(true);
    expect(new Set(images.pixels).size).toBeGreaterThan(100);
    const labels = checkImageBatch(syntheticBatch(model.kind, 100, 7)).labels;
    expect(new Set(labels).size).toBeGreaterThan(5);
    expect(syntheticBatch(model.kind, 5, 7)).toEqual(batch);
    expect(syntheticBatch(model.kind, 5, 8)).not.toEqual(batch);
    const result = await model.computeGradients(batch, 0);
    expect(result.samples).toBe(5);
    expect(Number.isFinite(result.loss)).toBe(true);
    model.dispose();
  });

  it("builds full-length masked sentences the albert-mlm model accepts and scores", async () => {
    const model = createModel(tinyAlbert);
    model.setParameters(model.initialParameters(1));
    const size = 40;
    const T = tinyAlbert.maxSequenceLength;
    const batch = syntheticBatch(model.kind, size, 7);
    const tokens = checkMaskedTokenBatch(batch, tinyAlbert.vocabSize, T);
    expect(tokens.sequenceLength).toBe(T);
    expect(tokens.attentionMask.every((value) => value === 1)).toBe(true);
    let maskedCells = 0;
    for (let row = 0; row < size; row++) {
      const ids = tokens.inputIds.subarray(row * T, (row + 1) * T);
      const labels = tokens.labels.subarray(row * T, (row + 1) * T);
      expect(ids[0]).toBe(2); // [CLS]
      expect(ids[T - 1]).toBe(3); // [SEP]
      const masked = labels.filter((label) => label >= 0).length;
      expect(masked).toBeGreaterThanOrEqual(1);
      maskedCells += masked;
      labels.forEach((label, i) => {
        expect(ids[i]).toBe(label >= 0 ? 4 : ids[i]); // [MASK] exactly where a label is
        if (label >= 0) expect(label).toBeGreaterThanOrEqual(5); // an ordinary token
        if (label < 0 && i > 0 && i < T - 1) expect(ids[i]).toBeGreaterThanOrEqual(5);
      });
    }
    // About maskProbability of the 6 tokens per sentence (1.5), at least one: well below 3.
    expect(maskedCells / size).toBeGreaterThan(1.2);
    expect(maskedCells / size).toBeLessThan(2.5);
    const result = await model.computeGradients(batch, 0);
    expect(result.loss).toBeGreaterThan(0);
    expect(result.gradient.some((value) => value !== 0)).toBe(true);
    model.dispose();
  });

  it("rejects a size that is not a positive integer", () => {
    expect(() => syntheticBatch(modelKindOf(mlpConfig), 0, 1)).toThrow(RangeError);
    expect(() => syntheticBatch(modelKindOf(mlpConfig), 1.5, 1)).toThrow(/positive integer/);
  });
});
