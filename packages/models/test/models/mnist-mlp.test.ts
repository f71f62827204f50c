import { createRequire } from "node:module";
import * as tf from "@tensorflow/tfjs-core";
import "@tensorflow/tfjs-backend-cpu";
import { isSwarmError } from "@barnraise/swarm";
import { beforeAll, describe, expect, it } from "vitest";
import type { ImageBatch } from "../../src/models/batch.ts";
import { createModel } from "../../src/models/model-kinds.ts";
import { isModelError } from "../../src/models/model-error.ts";
import { MnistMlp, type MnistMlpConfig } from "../../src/models/mnist-mlp.ts";
import { SeededRandom } from "../../src/seeded-random.ts";

beforeAll(async () => {
  await tf.setBackend("cpu");
});

const config = (
  hiddenUnits: number[],
  activation: MnistMlpConfig["activation"] = "relu",
): MnistMlpConfig => ({
  kind: "mnist-mlp",
  hiddenUnits,
  activation,
});

/** `size` random images with labels 0…9 cycling. */
function randomBatch(size: number, seed: number): ImageBatch {
  const random = new SeededRandom(seed);
  const pixels = new Float32Array(size * 784).map(() => random.nextFloat());
  const labels = new Int32Array(size).map((_, i) => i % 10);
  return { kind: "image", size, pixels, labels };
}

/** Real digits from the `mnist` package: `perDigit` of each digit starting at index `from`. */
function mnistDigits(from: number, perDigit: number): ImageBatch {
  type Digit = { get(index: number): number[] };
  const mnist = createRequire(import.meta.url)("mnist") as Record<number, Digit>;
  const size = perDigit * 10;
  const pixels = new Float32Array(size * 784);
  const labels = new Int32Array(size);
  for (let i = 0; i < size; i++) {
    const digit = i % 10;
    const image = mnist[digit]?.get(from + Math.floor(i / 10)) ?? [];
    pixels.set(image, i * 784);
    labels[i] = digit;
  }
  return { kind: "image", size, pixels, labels };
}

function slice(batch: ImageBatch, start: number, size: number): ImageBatch {
  return {
    kind: "image",
    size,
    pixels: batch.pixels.subarray(start * 784, (start + size) * 784),
    labels: batch.labels.subarray(start, start + size),
  };
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

describe("mnist-mlp layout and initialization", () => {
  it("lays out the analytic parameter count in the documented order", () => {
    const model = createModel({ kind: "mnist-mlp", hiddenUnits: [128, 64], activation: "relu" });
    expect(model.layout.size).toBe(784 * 128 + 128 + 128 * 64 + 64 + 64 * 10 + 10);
    expect(model.layout.size).toBe(109_386);
    expect(model.layout.slots.map((slot) => slot.name)).toEqual([
      "hidden0.kernel",
      "hidden0.bias",
      "hidden1.kernel",
      "hidden1.bias",
      "output.kernel",
      "output.bias",
    ]);
    model.dispose();
  });

  it("initializes bit-identically for a seed, differently for another, with He/Glorot scales and zero biases", () => {
    const model = new MnistMlp(config([256]));
    const a = model.initialParameters(7);
    const b = model.initialParameters(7);
    const c = model.initialParameters(8);
    expect(Buffer.from(a.buffer).equals(Buffer.from(b.buffer))).toBe(true);
    expect(a.some((value, i) => value !== c[i])).toBe(true);
    const [hidden, hiddenBias, output] = model.layout.slots;
    if (hidden === undefined || hiddenBias === undefined || output === undefined) throw new Error("layout");
    const std = (from: number, length: number): number => {
      let sum = 0;
      for (let i = from; i < from + length; i++) sum += (a[i] ?? 0) ** 2;
      return Math.sqrt(sum / length);
    };
    expect(std(hidden.offset, hidden.length)).toBeCloseTo(Math.sqrt(2 / 784), 3);
    // Glorot uniform ±√(6/(256+10)): standard deviation limit/√3.
    expect(std(output.offset, output.length)).toBeCloseTo(Math.sqrt(6 / 266) / Math.sqrt(3), 2);
    expect(a.subarray(hiddenBias.offset, hiddenBias.offset + hiddenBias.length).every((v) => v === 0)).toBe(
      true,
    );
    model.dispose();
  });
});

describe("mnist-mlp forward and backward", () => {
  it("puts each layout slot into its own variable (output.bias alone sets the logits)", async () => {
    const model = new MnistMlp(config([4]));
    const parameters = new Float32Array(model.layout.size);
    const bias = model.layout.slots.find((slot) => slot.name === "output.bias");
    if (bias === undefined) throw new Error("no output.bias");
    for (let k = 0; k < 10; k++) parameters[bias.offset + k] = k;
    model.setParameters(parameters);
    const batch = randomBatch(10, 1);
    const result = await model.evaluate(batch);
    // Every image predicts 9; loss is the mean of −log softmax(0…9)[label] over labels 0…9.
    expect(result.accuracy).toBeCloseTo(0.1, 6);
    const logSumExp = Math.log([...Array(10).keys()].reduce((sum, k) => sum + Math.exp(k), 0));
    expect(result.loss).toBeCloseTo(logSumExp - 4.5, 4);
    // The model copied the vector: changing the caller's array afterwards changes nothing.
    parameters.fill(0);
    expect((await model.evaluate(batch)).loss).toBeCloseTo(logSumExp - 4.5, 4);
    model.dispose();
  });

  for (const activation of ["relu", "gelu", "tanh"] as const) {
    it(`matches finite differences on every tensor (${activation})`, async () => {
      const model = new MnistMlp(config([8, 6], activation));
      const parameters = model.initialParameters(3);
      model.setParameters(parameters);
      const batch = randomBatch(6, 2);
      const { gradient, loss, samples } = await model.computeGradients(batch, 0);
      expect(samples).toBe(6);
      expect(gradient).toHaveLength(model.layout.size);
      expect(loss).toBeCloseTo((await model.evaluate(batch)).loss, 5);
      const lossAt = async (index: number, delta: number): Promise<number> => {
        const shifted = parameters.slice();
        shifted[index] = (shifted[index] ?? 0) + delta;
        model.setParameters(shifted);
        return (await model.evaluate(batch)).loss;
      };
      const eps = 1e-2;
      for (const slot of model.layout.slots) {
        // The coordinate with the largest gradient in each tensor.
        let index = slot.offset;
        for (let i = slot.offset; i < slot.offset + slot.length; i++) {
          if (Math.abs(gradient[i] ?? 0) > Math.abs(gradient[index] ?? 0)) index = i;
        }
        const analytic = gradient[index] ?? 0;
        const numeric = ((await lossAt(index, eps)) - (await lossAt(index, -eps))) / (2 * eps);
        expect(Math.abs(analytic), slot.name).toBeGreaterThan(1e-3);
        expect(Math.abs(numeric - analytic), `${slot.name}[${index - slot.offset}]`).toBeLessThan(
          1e-2 * Math.abs(analytic) + 1e-4,
        );
      }
      model.dispose();
    });
  }

  it("leaks no tensors in setParameters, computeGradients, evaluate, and frees all on dispose", async () => {
    const before = tf.memory().numTensors;
    const model = new MnistMlp(config([16]));
    const created = tf.memory().numTensors;
    expect(created - before).toBe(4);
    model.setParameters(model.initialParameters(1));
    await model.computeGradients(randomBatch(5, 1), 1);
    await model.evaluate(randomBatch(5, 2));
    model.setParameters(model.initialParameters(2));
    expect(tf.memory().numTensors).toBe(created);
    model.dispose();
    expect(tf.memory().numTensors).toBe(before);
    expectModelError(() => model.evaluate(randomBatch(1, 1)), "DISPOSED", /disposed/);
  });
});

describe("mnist-mlp rejects bad input", () => {
  const model = new MnistMlp(config([4]));
  model.setParameters(model.initialParameters(0));
  const good = randomBatch(3, 0);

  it("rejects malformed batches with the field named", () => {
    expectModelError(
      () => model.evaluate({ ...good, labels: new Int32Array([0, 10, 1]) }),
      "MALFORMED_BATCH",
      /labels\[1\] is 10/,
    );
    expectModelError(
      () => model.evaluate({ ...good, labels: new Int32Array([0, -1, 1]) }),
      "MALFORMED_BATCH",
      /labels\[1\]/,
    );
    expectModelError(
      () => model.evaluate({ ...good, pixels: new Float32Array(784) }),
      "MALFORMED_BATCH",
      /pixels has 784/,
    );
    expectModelError(() => model.evaluate({ ...good, size: 0 }), "MALFORMED_BATCH", /batch size is 0/);
    const wrongType = { ...good, labels: new Float32Array(3) as unknown as Int32Array };
    expectModelError(() => model.evaluate(wrongType), "MALFORMED_BATCH", /labels must be a Int32Array/);
    const tokens = {
      kind: "masked-tokens" as const,
      size: 1,
      sequenceLength: 8,
      inputIds: new Int32Array(8),
      labels: new Int32Array(8),
      attentionMask: new Float32Array(8),
    };
    expectModelError(() => model.computeGradients(tokens, 0), "WRONG_BATCH_KIND", /image batches/);
  });

  it("rejects a parameter vector of the wrong length and a bad seed", () => {
    let caught: unknown;
    try {
      model.setParameters(new Float32Array(model.layout.size - 1));
    } catch (error) {
      caught = error;
    }
    expect(isSwarmError(caught) && caught.code === "LENGTH_MISMATCH").toBe(true);
    expectModelError(() => model.computeGradients(good, 1.5), "INVALID_SEED", /dropout seed/);
    expectModelError(() => model.initialParameters(Number.NaN), "INVALID_SEED", /initialization seed/);
  });
});

describe("mnist-mlp learns real digits with plain SGD", () => {
  it("drives the loss down and the held-out accuracy up", async () => {
    const train = mnistDigits(0, 50); // 500 digits
    const test = mnistDigits(500, 20); // 200 other digits
    const model = new MnistMlp(config([32]));
    let parameters = model.initialParameters(42);
    model.setParameters(parameters);
    const initial = await model.evaluate(test);
    const learningRate = 0.2;
    const batchSize = 50;
    for (let epoch = 0; epoch < 15; epoch++) {
      for (let start = 0; start < train.size; start += batchSize) {
        const { gradient } = await model.computeGradients(slice(train, start, batchSize), epoch);
        parameters = parameters.map((value, i) => value - learningRate * (gradient[i] ?? 0));
        model.setParameters(parameters);
      }
    }
    const final = await model.evaluate(test);
    // Measured on cpu: test loss 2.40 → 0.61, accuracy 0.08 → 0.86 (train accuracy 0.99).
    expect((await model.evaluate(train)).accuracy).toBeGreaterThan(0.95);
    expect(final.loss).toBeLessThan(initial.loss * 0.4);
    expect(final.accuracy).toBeGreaterThan(0.8);
    expect(final.predictions).toBe(200);
    model.dispose();
  });
});
