import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { join, sep } from "node:path";
import * as tf from "@tensorflow/tfjs-core";
import { MathBackendCPU } from "@tensorflow/tfjs-backend-cpu";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  BACKEND_CHOICES,
  BackendUnavailableError,
  InvalidBackendChoiceError,
  parseBackendChoice,
  describeBackend,
  type BackendLoader,
  type SelectedBackend,
} from "../../src/tf/backend.ts";
import { benchmarkBackend } from "../../src/tf/benchmark-backend.ts";
import { resolveWasmDirectory, selectNodeBackend } from "../../src/node/node-backends.ts";

const notInstalled =
  (packageName: string): BackendLoader =>
  () =>
    Promise.reject(
      Object.assign(new Error(`Cannot find package '${packageName}' imported from /x.js`), {
        code: "ERR_MODULE_NOT_FOUND",
      }),
    );
/** WebGPU left out: these tests are about the rest of the chain (webgpu.test.ts runs Dawn for real). */
const noWebGpu = { webgpu: notInstalled("@tensorflow/tfjs-backend-webgpu") };
const missingNatives = {
  gpu: notInstalled("@tensorflow/tfjs-node-gpu"),
  node: notInstalled("@tensorflow/tfjs-node"),
  ...noWebGpu,
};
const throwing: BackendLoader = () => {
  throw new Error("libtensorflow.so.2: cannot open shared object file\nstack…");
};

/** Whether a package can be resolved from the peer, i.e. is really installed on this machine. */
function installed(packageName: string): boolean {
  try {
    createRequire(import.meta.url).resolve(packageName);
    return true;
  } catch {
    return false;
  }
}
const nativesInstalled = installed("@tensorflow/tfjs-node-gpu") || installed("@tensorflow/tfjs-node");

/** A stand-in for tfjs-node(-gpu): a "tensorflow" backend that runs the CPU kernels. */
class FakeTensorflowBackend extends MathBackendCPU {
  readonly isUsingGpuDevice: boolean;
  constructor(usingGpu: boolean) {
    super();
    this.isUsingGpuDevice = usingGpu;
  }
}
function fakeTensorflowLoader(usingGpu: boolean): BackendLoader {
  return () => {
    // Like a real package, importing it a second time registers nothing new.
    if (tf.engine().backendNames().includes("tensorflow")) return Promise.resolve();
    tf.registerBackend("tensorflow", () => new FakeTensorflowBackend(usingGpu));
    for (const kernel of tf.getKernelsForBackend("cpu")) {
      tf.registerKernel({ ...kernel, backendName: "tensorflow" });
    }
    return Promise.resolve();
  };
}
// TF.js has one global engine: every test starts on the pure-JS backend with no "tensorflow" backend.
beforeEach(async () => {
  await tf.setBackend("cpu");
});
afterEach(() => {
  if (!tf.engine().backendNames().includes("tensorflow")) return;
  tf.removeBackend("tensorflow");
  for (const kernel of tf.getKernelsForBackend("tensorflow"))
    tf.unregisterKernel(kernel.kernelName, "tensorflow");
});

/** [[1,2],[3,4]]·[[5,6],[7,8]] and a seeded 7×5·5×3 product checked against plain loops. */
function expectMatmulCorrect(): void {
  const before = tf.memory().numTensors;
  const small = tf.tidy(() =>
    tf.matMul(tf.tensor2d([1, 2, 3, 4], [2, 2]), tf.tensor2d([5, 6, 7, 8], [2, 2])),
  );
  expect(Array.from(small.dataSync())).toEqual([19, 22, 43, 50]);
  small.dispose();

  const left = Array.from({ length: 35 }, (_, i) => ((i * 37) % 11) - 5);
  const right = Array.from({ length: 15 }, (_, i) => ((i * 13) % 7) / 4 - 0.75);
  const product = tf.tidy(() => tf.matMul(tf.tensor2d(left, [7, 5]), tf.tensor2d(right, [5, 3])));
  const got = product.dataSync();
  for (let r = 0; r < 7; r++) {
    for (let c = 0; c < 3; c++) {
      let want = 0;
      for (let k = 0; k < 5; k++) want += (left[r * 5 + k] ?? NaN) * (right[k * 3 + c] ?? NaN);
      expect(got[r * 3 + c]).toBeCloseTo(want, 4);
    }
  }
  product.dispose();
  expect(tf.memory().numTensors).toBe(before);
}

describe("parseBackendChoice", () => {
  it("accepts every choice, ignoring case and surrounding spaces", () => {
    for (const choice of BACKEND_CHOICES) expect(parseBackendChoice(choice)).toBe(choice);
    expect(parseBackendChoice("  WASM ")).toBe("wasm");
  });

  it.each(["", "gpu2", "tensorflow", "webgl", "auto,cpu", "__proto__", "toString", "c p u"])(
    "refuses %j with a message listing the choices",
    (text) => {
      expect(() => parseBackendChoice(text)).toThrow(InvalidBackendChoiceError);
      expect(() => parseBackendChoice(text)).toThrow(/use one of auto, gpu, webgpu, node, wasm, cpu/);
    },
  );
});

describe("selectBackend with the real packages", () => {
  it.skipIf(nativesInstalled)(
    "auto picks wasm here and records why both native backends were skipped",
    async () => {
      const selected = await selectNodeBackend("auto", { loaders: noWebGpu });
      expect(selected).toEqual({
        choice: "auto",
        name: "wasm",
        packageName: "@tensorflow/tfjs-backend-wasm",
        skipped: [
          { name: "tensorflow-gpu", reason: "not installed" },
          { name: "tensorflow", reason: "not installed" },
          { name: "webgpu", reason: "not installed" },
        ],
      });
      expect(tf.getBackend()).toBe("wasm");
    },
  );

  it.each(["cpu", "wasm"] as const)("explicit %s is activated and multiplies correctly", async (choice) => {
    await selectNodeBackend(choice === "cpu" ? "wasm" : "cpu"); // start from the other one
    const selected = await selectNodeBackend(choice);
    expect(selected).toMatchObject({ choice, name: choice, skipped: [] });
    expect(tf.getBackend()).toBe(choice);
    expectMatmulCorrect();
  });

  it.skipIf(nativesInstalled).each([
    ["gpu", "npm install @tensorflow/tfjs-node-gpu", "--backend auto"],
    ["node", "npm install @tensorflow/tfjs-node", "--backend wasm"],
  ] as const)(
    "explicit %s throws BackendUnavailableError saying what to do",
    async (choice, install, other) => {
      const error = await selectNodeBackend(choice).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(BackendUnavailableError);
      const unavailable = error as BackendUnavailableError;
      expect(unavailable.choice).toBe(choice);
      expect(unavailable.code).toBe("BACKEND_UNAVAILABLE");
      expect(unavailable.cause).toBeDefined();
      expect(unavailable.message).toContain("not installed");
      expect(unavailable.message).toContain(install);
      expect(unavailable.message).toContain(other);
      expect(tf.getBackend()).toBe("cpu");
    },
  );
});

describe("selectBackend with simulated packages", () => {
  it("skips a loader that throws and goes on to the next backend", async () => {
    const selected = await selectNodeBackend("auto", {
      loaders: { ...noWebGpu, gpu: throwing, node: missingNatives.node },
    });
    expect(selected.name).toBe("wasm");
    expect(selected.skipped).toEqual([
      {
        name: "tensorflow-gpu",
        reason: "failed to load: libtensorflow.so.2: cannot open shared object file",
      },
      { name: "tensorflow", reason: "not installed" },
      { name: "webgpu", reason: "not installed" },
    ]);
  });

  it("falls back to pure JS when wasm fails too", async () => {
    const wasm: BackendLoader = () => Promise.reject(new Error("bad wasm binary"));
    const selected = await selectNodeBackend("auto", { loaders: { ...missingNatives, wasm } });
    expect(selected).toMatchObject({ name: "cpu", packageName: "@tensorflow/tfjs-backend-cpu" });
    expect(selected.skipped.map((s) => s.name)).toEqual(["tensorflow-gpu", "tensorflow", "wasm", "webgpu"]);
    expect(tf.getBackend()).toBe("cpu");
  });

  it("throws listing every reason when nothing loads", async () => {
    const loaders = { ...missingNatives, wasm: throwing, cpu: throwing };
    const error = await selectNodeBackend("auto", { loaders }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(BackendUnavailableError);
    expect((error as BackendUnavailableError).choice).toBe("auto");
    expect((error as Error).message).toMatch(
      /tensorflow-gpu: not installed.*cpu: failed to load: libtensorflow/,
    );
  });

  it("skips a package that loads but registers no backend", async () => {
    const selected = await selectNodeBackend("auto", {
      loaders: { ...noWebGpu, gpu: () => Promise.resolve({}), node: throwing },
    });
    expect(selected.skipped[0]).toEqual({
      name: "tensorflow-gpu",
      reason: 'loaded but registered no "tensorflow" TF.js backend',
    });
    expect(selected.name).toBe("wasm");
  });

  it("skips a backend whose initialization fails", async () => {
    const broken: BackendLoader = () => {
      tf.registerBackend("tensorflow", () =>
        Promise.reject(new Error("CUDA driver version is insufficient")),
      );
      return Promise.resolve();
    };
    const selected = await selectNodeBackend("auto", {
      loaders: { ...noWebGpu, gpu: broken, node: throwing },
    });
    expect(selected.skipped[0]).toEqual({
      name: "tensorflow-gpu",
      reason: 'loaded but its "tensorflow" backend failed to initialize',
    });
    expect(selected.name).toBe("wasm");
    expect(tf.getBackend()).toBe("wasm");
  });

  it("skips a backend that initializes but cannot compute", async () => {
    const kernelless: BackendLoader = () => {
      tf.registerBackend("tensorflow", () => new FakeTensorflowBackend(true));
      return Promise.resolve();
    };
    const before = tf.memory().numTensors;
    const selected = await selectNodeBackend("auto", {
      loaders: { ...noWebGpu, gpu: kernelless, node: throwing },
    });
    expect(selected.name).toBe("wasm");
    expect(selected.skipped[0]?.reason).toMatch(
      /^failed to load: Kernel '\w+' not registered for backend 'tensorflow'/,
    );
    expect(tf.memory().numTensors).toBe(before);
  });

  it("reports tensorflow-gpu when the gpu package runs on a GPU", async () => {
    const selected = await selectNodeBackend("auto", {
      loaders: { ...noWebGpu, gpu: fakeTensorflowLoader(true), node: throwing },
    });
    expect(selected).toEqual({
      choice: "auto",
      name: "tensorflow-gpu",
      packageName: "@tensorflow/tfjs-node-gpu",
      skipped: [{ name: "webgpu", reason: "not installed" }],
    });
    expect(tf.getBackend()).toBe("tensorflow");
    expectMatmulCorrect();
  });

  it("reports plain tensorflow when the gpu package found no GPU, and refuses it for --backend gpu", async () => {
    const loaders = { ...noWebGpu, gpu: fakeTensorflowLoader(false), node: throwing };
    const selected = await selectNodeBackend("auto", { loaders });
    expect(selected).toMatchObject({ name: "tensorflow", packageName: "@tensorflow/tfjs-node-gpu" });
    expect(selected.skipped).toEqual([
      { name: "tensorflow-gpu", reason: expect.stringMatching(/no usable GPU/) as string },
      { name: "webgpu", reason: "not installed" },
    ]);

    await expect(selectNodeBackend("gpu", { loaders })).rejects.toThrow(/no usable GPU.*--backend auto/);
  });

  it("explicit node uses the tensorflow backend when its package loads", async () => {
    const selected = await selectNodeBackend("node", { loaders: { node: fakeTensorflowLoader(false) } });
    expect(selected).toEqual({
      choice: "node",
      name: "tensorflow",
      packageName: "@tensorflow/tfjs-node",
      skipped: [],
    });
    expect(tf.getBackend()).toBe("tensorflow");
  });

  describe("auto with WebGPU working too", () => {
    /** A stand-in for WebGPU: a "webgpu" backend running the CPU kernels, registered once. */
    const fakeWebGpu: BackendLoader = () => {
      if (!tf.engine().backendNames().includes("webgpu")) {
        tf.registerBackend("webgpu", () => new MathBackendCPU());
        for (const kernel of tf.getKernelsForBackend("cpu"))
          tf.registerKernel({ ...kernel, backendName: "webgpu" });
      }
      return Promise.resolve({ api: "vulkan", description: "Test GPU" });
    };
    /** A measurement that reads the active backend's speed from a table. */
    const measuring = (gflops: Record<string, number>) => () =>
      Promise.resolve({ gflops: gflops[tf.getBackend()] ?? 0, matmulSize: 256, runs: 8, milliseconds: 1 });
    const natives = { gpu: missingNatives.gpu, node: missingNatives.node, webgpu: fakeWebGpu };

    it("keeps WebGPU when it measures faster, saying what the other measured", async () => {
      const selected = await selectNodeBackend("auto", {
        loaders: natives,
        measure: measuring({ webgpu: 900, wasm: 30 }),
      });
      expect(selected).toMatchObject({
        name: "webgpu",
        packageName: "@tensorflow/tfjs-backend-webgpu",
        device: "vulkan: Test GPU",
        benchmark: { gflops: 900 },
      });
      expect(selected.skipped.at(-1)).toEqual({
        name: "wasm",
        reason: "measured 30.0 GFLOP/s against webgpu's 900",
      });
      expect(tf.getBackend()).toBe("webgpu");
      expect(describeBackend(selected, selected.benchmark)).toBe(
        "backend: webgpu (@tensorflow/tfjs-backend-webgpu, vulkan: Test GPU) — 900 GFLOP/s; skipped " +
          "tensorflow-gpu: not installed, tensorflow: not installed, wasm: measured 30.0 GFLOP/s against webgpu's 900",
      );
    });

    it("keeps wasm when WebGPU (a software rasterizer) measures slower", async () => {
      const selected = await selectNodeBackend("auto", {
        loaders: natives,
        measure: measuring({ webgpu: 5, wasm: 30 }),
      });
      expect(selected).toMatchObject({ name: "wasm", benchmark: { gflops: 30 } });
      expect(selected.skipped.at(-1)).toEqual({
        name: "webgpu",
        reason: "measured 5.00 GFLOP/s against wasm's 30.0",
      });
      expect(tf.getBackend()).toBe("wasm");
    });

    it("takes WebGPU without measuring when nothing else loads", async () => {
      const selected = await selectNodeBackend("auto", {
        loaders: { ...natives, wasm: throwing, cpu: throwing },
        measure: () => Promise.reject(new Error("nothing to compare")),
      });
      expect(selected.name).toBe("webgpu");
      expect(selected.benchmark).toBeUndefined();
    });

    it("explicit webgpu whose Dawn finds no adapter says what to install", async () => {
      const noAdapter: BackendLoader = () =>
        Promise.reject(new Error("Dawn found no WebGPU adapter (tried vulkan, opengles)"));
      await expect(selectNodeBackend("webgpu", { loaders: { webgpu: noAdapter } })).rejects.toThrow(
        /backend "webgpu" is unavailable: .*no WebGPU adapter.*libegl1 libegl-mesa0/,
      );
    });
  });

  it("explicit gpu with a throwing loader names the error in its message", async () => {
    await expect(selectNodeBackend("gpu", { loaders: { ...noWebGpu, gpu: throwing } })).rejects.toThrow(
      /@tensorflow\/tfjs-node-gpu failed to load: libtensorflow\.so\.2/,
    );
  });
});

describe("resolveWasmDirectory", () => {
  it("points at the package's dist directory holding the .wasm binaries", () => {
    const directory = resolveWasmDirectory();
    expect(directory.endsWith(sep)).toBe(true);
    expect(existsSync(join(directory, "tfjs-backend-wasm.wasm"))).toBe(true);
    expect(existsSync(join(directory, "tfjs-backend-wasm-simd.wasm"))).toBe(true);
  });
});

describe("benchmarkBackend", () => {
  it.each(["cpu", "wasm"] as const)("measures a positive rate on %s and leaks no tensors", async (choice) => {
    await selectNodeBackend(choice);
    const before = tf.memory().numTensors;
    const bench = await benchmarkBackend();
    expect(tf.memory().numTensors).toBe(before);
    expect(bench).toMatchObject({ matmulSize: 256, runs: 8 });
    expect(bench.gflops).toBeGreaterThan(0);
    expect(Number.isFinite(bench.gflops)).toBe(true);
    expect(bench.milliseconds).toBeGreaterThan(0);
  });

  it.each([{ matmulSize: 0 }, { matmulSize: 1.5 }, { matmulSize: 5000 }, { runs: 0 }, { warmupRuns: -1 }])(
    "refuses %j",
    async (options) => {
      await selectNodeBackend("cpu");
      const before = tf.memory().numTensors;
      await expect(benchmarkBackend(options)).rejects.toThrow(RangeError);
      expect(tf.memory().numTensors).toBe(before);
    },
  );
});

describe("describeBackend", () => {
  const selected: SelectedBackend = {
    choice: "auto",
    name: "wasm",
    packageName: "@tensorflow/tfjs-backend-wasm",
    skipped: [
      { name: "tensorflow-gpu", reason: "not installed" },
      { name: "tensorflow", reason: "not installed" },
    ],
  };

  it("says the backend, its speed and what was skipped in one line", () => {
    const line = describeBackend(selected, { gflops: 27.14, matmulSize: 256, runs: 8, milliseconds: 9.9 });
    expect(line).toBe(
      "backend: wasm (@tensorflow/tfjs-backend-wasm) — 27.1 GFLOP/s; " +
        "skipped tensorflow-gpu: not installed, tensorflow: not installed",
    );
  });

  it("notes an explicit choice and formats large and small rates without exponents", () => {
    const cpu: SelectedBackend = { ...selected, choice: "cpu", name: "cpu", skipped: [] };
    expect(describeBackend(cpu, { gflops: 1234.4, matmulSize: 256, runs: 8, milliseconds: 1 })).toBe(
      "backend: cpu (@tensorflow/tfjs-backend-wasm) — 1234 GFLOP/s (chosen with --backend cpu)",
    );
    expect(describeBackend(cpu)).not.toContain("GFLOP/s");
  });
});
