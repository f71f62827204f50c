import * as tf from "@tensorflow/tfjs-core";
import "@tensorflow/tfjs-backend-cpu";
import { parseExperimentConfig } from "@barnraise/protocol";
import { beforeAll, describe, expect, it } from "vitest";
import { AlbertMlm } from "../../src/models/albert-mlm.ts";
import type { AlbertMlmConfig } from "../../src/models/albert-parameters.ts";
import type { MaskedTokenBatch } from "../../src/models/batch.ts";
import { createModel } from "../../src/models/model-kinds.ts";
import { isModelError } from "../../src/models/model-error.ts";
import { SeededRandom } from "../../src/seeded-random.ts";

beforeAll(async () => {
  await tf.setBackend("cpu");
});

const PAD = 0;
const CLS = 1;
const SEP = 2;
const MASK = 3;

const tiny: AlbertMlmConfig = {
  kind: "albert-mlm",
  vocabSize: 64,
  embeddingSize: 8,
  hiddenSize: 8,
  numLayers: 2,
  numHeads: 2,
  intermediateSize: 16,
  maxSequenceLength: 8,
  maskProbability: 0.15,
  dropout: 0.1,
};

/** ALBERT's parameter count, written out independently of the layout code. */
function analyticCount(c: AlbertMlmConfig): number {
  const { vocabSize: V, embeddingSize: E, hiddenSize: H, intermediateSize: I, maxSequenceLength: P } = c;
  const embeddings = V * E + P * E + 2 * E + (E * H + H);
  const layer = 4 * (H * H + H) + 2 * H + (H * I + I) + (I * H + H) + 2 * H;
  const head = H * E + E + 2 * E + V;
  return embeddings + layer + head;
}

/**
 * Sentences of a tiny language: each repeats one of `patterns` 4-token motifs ("a b c d a b c d …")
 * from a random phase, with a random length, as [CLS] tokens… [SEP] [PAD]…; 15 % of the tokens (at
 * least one) are replaced by [MASK] and become labels.
 */
function languageBatch(
  size: number,
  length: number,
  random: SeededRandom,
  patterns: number[][],
): MaskedTokenBatch {
  const inputIds = new Int32Array(size * length).fill(PAD);
  const labels = new Int32Array(size * length).fill(-1);
  const attentionMask = new Float32Array(size * length);
  for (let row = 0; row < size; row++) {
    const pattern = patterns[Math.floor(random.nextFloat() * patterns.length)] ?? [];
    const phase = Math.floor(random.nextFloat() * 4);
    const words = length - 2 - Math.floor(random.nextFloat() * 4); // 0–3 pads
    const base = row * length;
    inputIds[base] = CLS;
    for (let i = 0; i < words; i++) inputIds[base + 1 + i] = pattern[(phase + i) % 4] ?? PAD;
    inputIds[base + 1 + words] = SEP;
    attentionMask.fill(1, base, base + words + 2);
    let masked = 0;
    for (let i = 0; i < words; i++) {
      if (random.nextFloat() < 0.15 || (i === words - 1 && masked === 0)) {
        labels[base + 1 + i] = inputIds[base + 1 + i] ?? PAD;
        inputIds[base + 1 + i] = MASK;
        masked++;
      }
    }
  }
  return { kind: "masked-tokens", size, sequenceLength: length, inputIds, labels, attentionMask };
}

function makePatterns(count: number, random: SeededRandom, vocabSize: number): number[][] {
  return Array.from({ length: count }, () =>
    Array.from({ length: 4 }, () => 4 + Math.floor(random.nextFloat() * (vocabSize - 4))),
  );
}

function expectModelError(run: () => unknown, code: string, message: RegExp): void {
  let caught: unknown;
  try {
    run();
  } catch (error) {
    caught = error;
  }
  expect(isModelError(caught) && caught.code === code, String(caught)).toBe(true);
  expect(String(caught)).toMatch(message);
}

describe("albert-mlm layout", () => {
  it("has the analytic parameter count for the default config", () => {
    const config = parseExperimentConfig({ model: { kind: "albert-mlm" } }).model;
    if (config.kind !== "albert-mlm") throw new Error("kind");
    const model = createModel(config);
    expect(model.layout.size).toBe(analyticCount(config));
    expect(model.layout.size).toBe(419_648);
    expect(model.layout.slots[0]).toEqual({ name: "embeddings.word", offset: 0, length: 4096 * 64 });
    model.dispose();
  });

  it("shares one layer: 1 and 4 layers have the same layout but compute different things", async () => {
    const one = new AlbertMlm({ ...tiny, numLayers: 1, dropout: 0 });
    const four = new AlbertMlm({ ...tiny, numLayers: 4, dropout: 0 });
    expect(four.layout).toEqual(one.layout);
    expect(one.layout.size).toBe(analyticCount(tiny));
    const parameters = one.initialParameters(5);
    one.setParameters(parameters);
    four.setParameters(parameters);
    const batch = languageBatch(2, 8, new SeededRandom(1), makePatterns(2, new SeededRandom(2), 64));
    expect((await four.evaluate(batch)).loss).not.toBeCloseTo((await one.evaluate(batch)).loss, 4);
    one.dispose();
    four.dispose();
  });

  it("initializes bit-identically per seed: N(0, 0.02) cut at 2σ, zero biases, unit norm gains", () => {
    const model = new AlbertMlm(tiny);
    const a = model.initialParameters(11);
    expect(Buffer.from(a.buffer).equals(Buffer.from(model.initialParameters(11).buffer))).toBe(true);
    expect(a.some((value, i) => value !== model.initialParameters(12)[i])).toBe(true);
    const values = (name: string): Float32Array => {
      const slot = model.layout.slots.find((s) => s.name === name);
      if (slot === undefined) throw new Error(name);
      return a.subarray(slot.offset, slot.offset + slot.length);
    };
    const word = values("embeddings.word");
    const rms = Math.sqrt(word.reduce((sum, v) => sum + v * v, 0) / word.length);
    expect(rms).toBeGreaterThan(0.015);
    expect(rms).toBeLessThan(0.02);
    expect(Math.max(...word.map(Math.abs))).toBeLessThanOrEqual(0.04 + 1e-7);
    expect(values("layer.attention.norm.gain").every((v) => v === 1)).toBe(true);
    expect(values("layer.ffn.intermediate.bias").every((v) => v === 0)).toBe(true);
    expect(values("mlm.output.bias").every((v) => v === 0)).toBe(true);
    model.dispose();
  });
});

describe("albert-mlm gradients", () => {
  const patterns = makePatterns(3, new SeededRandom(3), 64);

  it("matches finite differences on every tensor (with dropout drawn from the same seed)", async () => {
    const model = new AlbertMlm(tiny);
    // Weights 5× the init scale (so attention gradients rise above float32 noise), and every
    // value jittered, so biases and gains are not at their special values 0 and 1.
    const jitter = new SeededRandom(10);
    const parameters = model.initialParameters(9).map((v) => v * 5 + (jitter.nextFloat() - 0.5) * 0.2);
    model.setParameters(parameters);
    const batch = languageBatch(3, 8, new SeededRandom(4), patterns);
    const { gradient, loss, samples } = await model.computeGradients(batch, 77);
    expect(samples).toBe(3);
    expect(gradient).toHaveLength(model.layout.size);
    const lossAt = async (index: number, delta: number): Promise<number> => {
      const shifted = parameters.slice();
      shifted[index] = (shifted[index] ?? 0) + delta;
      model.setParameters(shifted);
      return (await model.computeGradients(batch, 77)).loss;
    };
    expect(await lossAt(0, 0)).toBe(loss);
    const eps = 1e-2;
    for (const slot of model.layout.slots) {
      let index = slot.offset;
      for (let i = slot.offset; i < slot.offset + slot.length; i++) {
        if (Math.abs(gradient[i] ?? 0) > Math.abs(gradient[index] ?? 0)) index = i;
      }
      const analytic = gradient[index] ?? 0;
      if (slot.name === "layer.attention.key.bias") {
        // q·b_k is the same for every key of a query, and softmax ignores a shared shift: exactly 0.
        expect(Math.abs(analytic)).toBeLessThan(1e-6);
        continue;
      }
      const numeric = ((await lossAt(index, eps)) - (await lossAt(index, -eps))) / (2 * eps);
      expect(Math.abs(analytic), slot.name).toBeGreaterThan(1e-2);
      expect(
        Math.abs(numeric - analytic),
        `${slot.name}[${index - slot.offset}] ${numeric} vs ${analytic}`,
      ).toBeLessThan(1e-2 * Math.abs(analytic) + 1e-4);
    }
    model.dispose();
  });

  it("draws dropout from the seed only during computeGradients", async () => {
    const model = new AlbertMlm(tiny);
    model.setParameters(model.initialParameters(1));
    const batch = languageBatch(2, 8, new SeededRandom(5), patterns);
    const a = await model.computeGradients(batch, 1);
    const b = await model.computeGradients(batch, 1);
    const c = await model.computeGradients(batch, 2);
    expect(Buffer.from(a.gradient.buffer).equals(Buffer.from(b.gradient.buffer))).toBe(true);
    expect(c.loss).not.toBe(a.loss);
    expect((await model.evaluate(batch)).loss).toBe((await model.evaluate(batch)).loss);
    const noDropout = new AlbertMlm({ ...tiny, dropout: 0 });
    noDropout.setParameters(model.initialParameters(1));
    expect((await noDropout.evaluate(batch)).loss).toBeCloseTo((await model.evaluate(batch)).loss, 6);
    expect((await noDropout.computeGradients(batch, 1)).loss).toBeCloseTo(
      (await model.evaluate(batch)).loss,
      5,
    );
    model.dispose();
    noDropout.dispose();
  });

  it("ignores padding: tokens behind a zero attention mask do not change the prediction", async () => {
    const model = new AlbertMlm({ ...tiny, dropout: 0 });
    model.setParameters(model.initialParameters(2));
    const batch = languageBatch(1, 8, new SeededRandom(6), patterns);
    const padded = batch.attentionMask.indexOf(0);
    expect(padded).toBeGreaterThan(0);
    const changed = { ...batch, inputIds: batch.inputIds.map((id, i) => (i >= padded ? 40 : id)) };
    expect((await model.evaluate(changed)).loss).toBeCloseTo((await model.evaluate(batch)).loss, 5);
    model.dispose();
  });

  it("returns loss 0 and a zero gradient for a batch with nothing to predict", async () => {
    const model = new AlbertMlm(tiny);
    model.setParameters(model.initialParameters(0));
    const batch = languageBatch(2, 8, new SeededRandom(7), patterns);
    const empty = { ...batch, labels: new Int32Array(16).fill(-1) };
    const result = await model.computeGradients(empty, 0);
    expect(result).toEqual({ loss: 0, samples: 2, gradient: new Float32Array(model.layout.size) });
    expect(await model.evaluate(empty)).toEqual({ loss: 0, accuracy: 0, predictions: 0 });
    model.dispose();
  });

  it("leaks no tensors and frees its variables on dispose", async () => {
    const before = tf.memory().numTensors;
    const model = new AlbertMlm(tiny);
    const created = tf.memory().numTensors;
    expect(created - before).toBe(model.layout.slots.length);
    const batch = languageBatch(2, 8, new SeededRandom(8), patterns);
    model.setParameters(model.initialParameters(0));
    await model.computeGradients(batch, 3);
    await model.evaluate(batch);
    model.setParameters(model.initialParameters(1));
    expect(tf.memory().numTensors).toBe(created);
    model.dispose();
    expect(tf.memory().numTensors).toBe(before);
    expectModelError(() => model.computeGradients(batch, 0), "DISPOSED", /disposed/);
  });
});

describe("albert-mlm rejects bad input", () => {
  const model = new AlbertMlm(tiny);
  model.setParameters(model.initialParameters(0));
  const good = languageBatch(2, 8, new SeededRandom(9), makePatterns(2, new SeededRandom(1), 64));

  it("names the offending field", () => {
    const ids = good.inputIds.slice();
    ids[3] = 64;
    expectModelError(
      () => model.evaluate({ ...good, inputIds: ids }),
      "MALFORMED_BATCH",
      /inputIds\[3\] is 64/,
    );
    ids[3] = -2;
    expectModelError(
      () => model.evaluate({ ...good, inputIds: ids }),
      "MALFORMED_BATCH",
      /inputIds\[3\] is -2/,
    );
    const labels = good.labels.slice();
    labels[5] = 100;
    expectModelError(() => model.evaluate({ ...good, labels }), "MALFORMED_BATCH", /labels\[5\] is 100/);
    const mask = good.attentionMask.slice();
    mask[1] = 0.5;
    expectModelError(
      () => model.evaluate({ ...good, attentionMask: mask }),
      "MALFORMED_BATCH",
      /attentionMask\[1\]/,
    );
    const long = languageBatch(1, 9, new SeededRandom(1), [[4, 5, 6, 7]]);
    expectModelError(
      () => model.evaluate(long),
      "MALFORMED_BATCH",
      /sequenceLength is 9; the model takes 1…8/,
    );
    expectModelError(
      () => model.evaluate({ ...good, labels: good.labels.subarray(1) }),
      "MALFORMED_BATCH",
      /labels has 15 elements, expected 16/,
    );
    const image = {
      kind: "image" as const,
      size: 1,
      pixels: new Float32Array(784),
      labels: new Int32Array(1),
    };
    expectModelError(() => model.computeGradients(image, 0), "WRONG_BATCH_KIND", /masked-token batches/);
  });

  it("refuses a config whose hidden size does not split into heads", () => {
    expectModelError(
      () => new AlbertMlm({ ...tiny, numHeads: 3 }),
      "INVALID_CONFIG",
      /not divisible by numHeads 3/,
    );
  });
});

describe("albert-mlm learns a tiny repeating language", () => {
  // Three 4-token motifs: a model that ignores context can at best learn the unigram distribution
  // (ln 12 ≈ 2.48 nats); 100 steps from ln 64 ≈ 4.16 get to about 2.27 (measured on cpu).
  it("drives the masked-token loss down within 100 Adam steps", async () => {
    const config: AlbertMlmConfig = {
      ...tiny,
      embeddingSize: 16,
      hiddenSize: 32,
      intermediateSize: 64,
      maxSequenceLength: 16,
      numLayers: 2,
      numHeads: 2,
      dropout: 0,
    };
    const model = new AlbertMlm(config);
    const random = new SeededRandom(2024);
    const patterns = makePatterns(3, random, config.vocabSize);
    const held = languageBatch(32, 16, new SeededRandom(99), patterns);
    const parameters = model.initialParameters(1);
    model.setParameters(parameters);
    const initial = await model.evaluate(held);
    const m = new Float32Array(parameters.length);
    const v = new Float32Array(parameters.length);
    const [lr, beta1, beta2] = [5e-3, 0.9, 0.999];
    const losses: number[] = [];
    for (let step = 1; step <= 100; step++) {
      const { gradient, loss } = await model.computeGradients(languageBatch(8, 16, random, patterns), step);
      losses.push(loss);
      const c1 = 1 - beta1 ** step;
      const c2 = 1 - beta2 ** step;
      for (let i = 0; i < parameters.length; i++) {
        const g = gradient[i] ?? 0;
        m[i] = beta1 * (m[i] ?? 0) + (1 - beta1) * g;
        v[i] = beta2 * (v[i] ?? 0) + (1 - beta2) * g * g;
        parameters[i] =
          (parameters[i] ?? 0) - (lr * ((m[i] ?? 0) / c1)) / (Math.sqrt((v[i] ?? 0) / c2) + 1e-8);
      }
      model.setParameters(parameters);
    }
    const final = await model.evaluate(held);
    const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length;
    expect(initial.loss).toBeGreaterThan(Math.log(64) - 0.3);
    expect(final.loss).toBeLessThan(initial.loss - 1.2);
    expect(mean(losses.slice(-10))).toBeLessThan(mean(losses.slice(0, 10)) - 1);
    expect(final.accuracy).toBeGreaterThan(0.15);
    model.dispose();
  });
});
