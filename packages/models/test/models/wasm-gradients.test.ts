import * as tf from "@tensorflow/tfjs-core";
import { parseExperimentConfig, type ModelConfig } from "@barnraise/protocol";
import { beforeAll, describe, expect, it } from "vitest";
import { createModel } from "../../src/models/model-kinds.ts";
import { selectNodeBackend } from "../../src/node/node-backends.ts";
import { syntheticBatch } from "../../src/data/synthetic-batch.ts";
import { modelKindOf } from "../../src/models/model-kinds.ts";

/**
 * Every preset trains on the WebAssembly backend (the one most volunteers get) and computes the
 * same gradients there as on the pure-JS backend. The masked LM's embedding lookup is the case in
 * point: TF.js differentiates `gather` with a kernel the wasm backend lacks.
 */

const configs: Record<string, ModelConfig> = {
  "mnist-mlp": parseExperimentConfig({ model: { kind: "mnist-mlp", hiddenUnits: [16] } }).model,
  "albert-mlm": parseExperimentConfig({
    model: {
      kind: "albert-mlm",
      vocabSize: 64,
      embeddingSize: 8,
      hiddenSize: 8,
      numLayers: 2,
      numHeads: 2,
      intermediateSize: 16,
      maxSequenceLength: 12,
      dropout: 0,
    },
  }).model,
};

async function gradientOn(
  backend: "cpu" | "wasm",
  config: ModelConfig,
): Promise<{ loss: number; gradient: Float32Array }> {
  if (!(await tf.setBackend(backend))) throw new Error(`cannot switch to ${backend}`);
  const model = createModel(config);
  try {
    const before = tf.memory().numTensors;
    model.setParameters(model.initialParameters(11));
    const batch = syntheticBatch(modelKindOf(config), 6, 5);
    const { loss, gradient } = await model.computeGradients(batch, 3);
    expect(tf.memory().numTensors).toBe(before);
    return { loss, gradient };
  } finally {
    model.dispose();
  }
}

beforeAll(async () => {
  await selectNodeBackend("cpu");
  await selectNodeBackend("wasm");
});

describe.each(Object.keys(configs))("%s on wasm", (preset) => {
  it("computes the pure-JS backend's loss and gradients", async () => {
    const config = configs[preset];
    if (config === undefined) throw new Error(preset);
    const cpu = await gradientOn("cpu", config);
    const wasm = await gradientOn("wasm", config);
    expect(wasm.loss).toBeCloseTo(cpu.loss, 4);
    let scale = 0;
    for (const value of cpu.gradient) scale = Math.max(scale, Math.abs(value));
    expect(scale).toBeGreaterThan(0);
    for (let i = 0; i < cpu.gradient.length; i++) {
      expect(Math.abs((wasm.gradient[i] ?? NaN) - (cpu.gradient[i] ?? 0))).toBeLessThan(1e-4 * scale + 1e-6);
    }
  });
});
