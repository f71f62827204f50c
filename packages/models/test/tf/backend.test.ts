import * as tf from "@tensorflow/tfjs-core";
import { describe, expect, it } from "vitest";
import { BackendUnavailableError, cpuBackendLoader, selectBackend } from "../../src/tf/backend.ts";

/**
 * The backend choice of the browser-ready core: the runtime gives the loaders it has, and a
 * backend without one is unavailable (the Node.js loaders are tested in test/node/node-backends.test.ts).
 */
/** A loader of the plain JavaScript backend under another backend's name: a browser's choice, run here. */
function cpuAs(name: string) {
  return async () => {
    const { MathBackendCPU } = await import("@tensorflow/tfjs-backend-cpu");
    if (tf.engine().backendNames().includes(name)) return;
    tf.registerBackend(name, () => new MathBackendCPU());
    for (const kernel of tf.getKernelsForBackend("cpu")) tf.registerKernel({ ...kernel, backendName: name });
  };
}

describe("selectBackend with the loaders a runtime has", () => {
  it("refuses a backend this runtime has no loader for, saying so", async () => {
    const error = await selectBackend("wasm", { loaders: { cpu: cpuBackendLoader } }).then(
      () => undefined,
      (reason: unknown) => reason,
    );
    expect(error).toBeInstanceOf(BackendUnavailableError);
    expect((error as Error).message).toMatch(
      /backend "wasm" is unavailable: .* is not available in this runtime/,
    );
  });

  it("takes, for auto, the first backend this runtime has, passing over those it has not", async () => {
    const selected = await selectBackend("auto", { loaders: { cpu: cpuBackendLoader } });
    expect(selected.name).toBe("cpu");
    expect(selected.skipped).toEqual([]);
  });

  it("measures, for auto, the GPU backends that work against the first other one, and keeps the fastest", async () => {
    const speeds: Record<string, number> = { webgpu: 5, webgl: 40, cpu: 20 };
    const measured: string[] = [];
    const selected = await selectBackend("auto", {
      loaders: {
        webgpu: cpuAs("webgpu"),
        webgl: cpuAs("webgl"),
        wasm: () => Promise.reject(new Error("no wasm binaries here")),
        cpu: cpuBackendLoader,
      },
      measure: () => {
        const name = tf.getBackend();
        measured.push(name);
        return Promise.resolve({ gflops: speeds[name] ?? 0, matmulSize: 64, runs: 1, milliseconds: 1 });
      },
    });
    expect(selected.name).toBe("webgl");
    expect(tf.getBackend()).toBe("webgl");
    expect(measured).toEqual(["webgpu", "webgl", "cpu"]);
    expect(selected.skipped).toEqual([
      { name: "wasm", reason: "failed to load: no wasm binaries here" },
      { name: "webgpu", reason: "measured 5.00 GFLOP/s against webgl's 40.0" },
      { name: "cpu", reason: "measured 20.0 GFLOP/s against webgl's 40.0" },
    ]);
  });

  it("keeps, for auto, the other backend when a GPU backend is no faster", async () => {
    const selected = await selectBackend("auto", {
      loaders: { webgl: cpuAs("webgl"), cpu: cpuBackendLoader },
      measure: () => Promise.resolve({ gflops: 10, matmulSize: 64, runs: 1, milliseconds: 1 }),
    });
    expect(selected.name).toBe("cpu");
    expect(tf.getBackend()).toBe("cpu");
    expect(selected.skipped).toEqual([{ name: "webgl", reason: "measured 10.0 GFLOP/s against cpu's 10.0" }]);
  });
});
