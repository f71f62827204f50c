import { dirname, join } from "node:path";
import { createRequire } from "node:module";
import { BrowserLab } from "@barnraise/browserlab";
import { parseExperimentConfig } from "@barnraise/protocol";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { syntheticBatch } from "../../src/data/synthetic-batch.ts";
import { createModel, modelKindOf } from "../../src/models/model-kinds.ts";
import { selectNodeBackend } from "../../src/node/node-backends.ts";
import type { BrowserModels } from "../support/browser-models-entry.ts";

/**
 * The models in a real Chromium, as a volunteer's tab runs them: the default mnist-mlp, bundled for
 * the browser, computes on TF.js's wasm and plain-JavaScript backends the same loss and gradient as
 * in Node.js, from the same initial parameters (@barnraise/browserlab).
 */

const ENTRY = new URL("../support/browser-models-entry.ts", import.meta.url).pathname;
const WASM_DIR = dirname(createRequire(import.meta.url).resolve("@tensorflow/tfjs-backend-wasm"));
const SEED = 7;

let lab: BrowserLab;

beforeAll(async () => {
  lab = await BrowserLab.start({
    files: [
      "tfjs-backend-wasm.wasm",
      "tfjs-backend-wasm-simd.wasm",
      "tfjs-backend-wasm-threaded-simd.wasm",
    ].map((name) => join(WASM_DIR, name)),
  });
}, 60_000);

afterAll(async () => {
  await lab.stop();
});

/** The loss and gradient Node.js computes on wasm. */
async function inNode(): Promise<{ loss: number; gradient: Float32Array }> {
  await selectNodeBackend("wasm");
  const config = parseExperimentConfig({}).model;
  const model = createModel(config);
  try {
    model.setParameters(model.initialParameters(SEED));
    return await model.computeGradients(syntheticBatch(modelKindOf(config), 64, SEED), SEED);
  } finally {
    model.dispose();
  }
}

describe("the models in Chromium", () => {
  it.each(["wasm", "cpu"] as const)(
    "compute on %s the loss and gradient Node.js computes",
    async (backend) => {
      const expected = await inNode();
      const { handle, errors } = await lab.open<BrowserModels>(ENTRY, "browserModels");
      const result = await handle.evaluate(
        (models, [name, base, seed]) => models.gradient(name, base, seed),
        [backend, lab.origin, SEED] as const,
      );
      expect(errors).toEqual([]);
      expect(result.backend).toBe(backend);
      expect(result.loss).toBeGreaterThan(0);
      expect(result.loss).toBeCloseTo(expected.loss, 4);
      expect(result.gradient).toHaveLength(expected.gradient.length);
      let largest = 0;
      let scale = 0;
      for (const [index, value] of result.gradient.entries()) {
        largest = Math.max(largest, Math.abs(value - (expected.gradient[index] ?? Number.NaN)));
        scale = Math.max(scale, Math.abs(value));
      }
      expect(scale).toBeGreaterThan(0);
      expect(largest).toBeLessThan(1e-4 * scale);
    },
    60_000,
  );

  it("choose for auto the fastest of the browser's backends that work, saying why the others were passed over", async () => {
    const { handle, errors } = await lab.open<BrowserModels>(ENTRY, "browserModels");
    const auto = await handle.evaluate((models, base) => models.autoBackend(base), lab.origin);
    expect(errors).toEqual([]);
    // Headless Chromium here has no WebGPU adapter; WebGL (software) and wasm both work, and one
    // was measured against the other. Never a Node.js backend.
    expect(["webgl", "wasm"]).toContain(auto.name);
    expect(auto.skipped.some((line) => line.startsWith("webgpu: "))).toBe(true);
    expect(auto.skipped.filter((line) => / measured .* GFLOP\/s against /.test(line))).toHaveLength(1);
    expect(auto.skipped.join(" ")).not.toMatch(/tensorflow/);
    expect(auto.line).toMatch(new RegExp(`^backend: ${auto.name} .* GFLOP/s`));
  }, 60_000);

  it("keep verified files in IndexedDB across page loads, each store within a name apart", async () => {
    const first = (await lab.open<BrowserModels>(ENTRY, "browserModels")).handle;
    const where = await first.evaluate((models) =>
      models.putBlob("cache", ["datasets", "mnist", "shard-0"], [1, 2, 3]),
    );
    expect(where).toBe("IndexedDB barnraise-blobs-cache (datasets/mnist/shard-0)");
    await first.evaluate((models) => models.putBlob("cache", ["shard-0"], [9]));
    await lab.closePages();

    const second = (await lab.open<BrowserModels>(ENTRY, "browserModels")).handle;
    const read = (path: string[]) =>
      second.evaluate((models, blobPath) => models.getBlob("cache", blobPath), path);
    expect(await read(["datasets", "mnist", "shard-0"])).toEqual([1, 2, 3]);
    expect(await read(["shard-0"])).toEqual([9]);
    expect(await read(["datasets", "mnist", "shard-1"])).toBeUndefined();
  }, 60_000);
});
