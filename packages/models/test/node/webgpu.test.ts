import * as tf from "@tensorflow/tfjs-core";
import { parseExperimentConfig, type ModelConfig } from "@barnraise/protocol";
import { beforeAll, describe, expect, it } from "vitest";
import { createModel } from "../../src/models/model-kinds.ts";
import { describeBackend, type SelectedBackend } from "../../src/tf/backend.ts";
import { selectNodeBackend } from "../../src/node/node-backends.ts";
import { syntheticBatch } from "../../src/data/synthetic-batch.ts";
import { modelKindOf } from "../../src/models/model-kinds.ts";

/**
 * The WebGPU backend for real: Dawn's Node binding with whatever adapter it finds. On a machine
 * with a GPU driver that is the GPU; on CI it is Mesa's llvmpipe through OpenGL ES (the test
 * script installs Mesa's EGL where it is missing), so the code path runs on every machine.
 */

const config: ModelConfig = parseExperimentConfig({
  model: { kind: "mnist-mlp", hiddenUnits: [32] },
}).model;

async function use(backend: "wasm" | "webgpu"): Promise<void> {
  if (!(await tf.setBackend(backend))) throw new Error(`cannot switch to ${backend}`);
  await tf.ready();
}

async function gradientOn(backend: "wasm" | "webgpu"): Promise<{ loss: number; gradient: Float32Array }> {
  await use(backend);
  const model = createModel(config);
  try {
    const before = tf.memory().numTensors;
    model.setParameters(model.initialParameters(11));
    const { loss, gradient } = await model.computeGradients(syntheticBatch(modelKindOf(config), 64, 5), 3);
    expect(tf.memory().numTensors).toBe(before);
    return { loss, gradient };
  } finally {
    model.dispose();
  }
}

let webgpu: SelectedBackend;

beforeAll(async () => {
  await selectNodeBackend("wasm");
  webgpu = await selectNodeBackend("webgpu");
}, 60_000);

describe("the WebGPU backend", () => {
  it("runs on an adapter Dawn found and multiplies matrices on it correctly", async () => {
    expect(webgpu).toMatchObject({ name: "webgpu", packageName: "@tensorflow/tfjs-backend-webgpu" });
    expect(webgpu.device).toMatch(/^(vulkan|metal|d3d12|opengles): \S/);
    await use("webgpu");
    // 96×80 · 80×72: large enough that TF.js runs it on the GPU, not on its CPU fallback.
    const left = Float32Array.from({ length: 96 * 80 }, (_, i) => ((i * 37) % 23) / 11 - 1);
    const right = Float32Array.from({ length: 80 * 72 }, (_, i) => ((i * 13) % 17) / 8 - 1);
    const product = tf.matMul(tf.tensor2d(left, [96, 80]), tf.tensor2d(right, [80, 72]));
    const got = await product.data();
    tf.dispose(product);
    for (const [r, c] of [
      [0, 0],
      [5, 71],
      [95, 3],
      [47, 36],
    ] as const) {
      let want = 0;
      for (let k = 0; k < 80; k++) want += (left[r * 80 + k] ?? NaN) * (right[k * 72 + c] ?? NaN);
      expect(got[r * 72 + c]).toBeCloseTo(want, 3);
    }
  });

  it("computes the wasm backend's mnist-mlp loss and gradients within float tolerance", async () => {
    const wasm = await gradientOn("wasm");
    const gpu = await gradientOn("webgpu");
    expect(gpu.gradient).toHaveLength(wasm.gradient.length);
    expect(gpu.loss).toBeCloseTo(wasm.loss, 4);
    let scale = 0;
    for (const value of wasm.gradient) scale = Math.max(scale, Math.abs(value));
    expect(scale).toBeGreaterThan(0);
    let worst = 0;
    for (let i = 0; i < wasm.gradient.length; i++) {
      worst = Math.max(worst, Math.abs((gpu.gradient[i] ?? NaN) - (wasm.gradient[i] ?? 0)));
    }
    expect(worst).toBeLessThan(1e-4 * scale + 1e-6);
  });

  it("trains: 40 SGD steps on WebGPU bring the loss well down", async () => {
    await use("webgpu");
    const model = createModel(config);
    try {
      const batch = syntheticBatch(modelKindOf(config), 64, 9);
      const parameters = model.initialParameters(4);
      const losses: number[] = [];
      for (let step = 0; step < 40; step++) {
        model.setParameters(parameters);
        const { loss, gradient } = await model.computeGradients(batch, step);
        losses.push(loss);
        for (let i = 0; i < parameters.length; i++)
          parameters[i] = (parameters[i] ?? 0) - 0.05 * (gradient[i] ?? 0);
      }
      const first = losses[0] ?? NaN;
      const last = losses.at(-1) ?? NaN;
      expect(first).toBeGreaterThan(1.5);
      expect(last).toBeLessThan(first * 0.6);
    } finally {
      model.dispose();
    }
  });

  it("is measured against the other backend by auto, which keeps the faster and says so", async () => {
    const selected = await selectNodeBackend("auto");
    const compared = selected.skipped.find((s) => s.reason.startsWith("measured "));
    expect(compared, describeBackend(selected)).toBeDefined();
    // "measured X GFLOP/s against <winner>'s Y": the loser's rate is below the winner's.
    const match = /^measured ([\d.]+) GFLOP\/s against (\S+)'s ([\d.]+)$/.exec(compared?.reason ?? "");
    expect(match?.[2]).toBe(selected.name);
    expect(Number(match?.[1])).toBeLessThanOrEqual(Number(match?.[3]));
    expect([compared?.name, selected.name].sort()).toContain("webgpu");
    expect(selected.benchmark?.gflops).toBeCloseTo(Number(match?.[3]), -1);
    expect(tf.getBackend()).toBe(selected.name === "webgpu" ? "webgpu" : selected.name);
  });
});
