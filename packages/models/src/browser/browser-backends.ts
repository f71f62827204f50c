import { cpuBackendLoader, type BackendLoaders } from "../tf/backend.ts";

/**
 * The TF.js backends of a browser: its own WebGPU (when it offers an adapter), WebGL, WebAssembly
 * (the binaries fetched from `wasmBase`, where the platform serves them) and plain JavaScript.
 * "auto" measures the GPU ones that work against wasm and keeps the fastest.
 */
export function browserBackendLoaders(options: {
  readonly wasmBase: string;
}): Omit<BackendLoaders, "gpu" | "node"> {
  return {
    webgpu: async () => {
      const gpu = (navigator as { gpu?: { requestAdapter(): Promise<unknown> } }).gpu;
      if (gpu === undefined) throw new Error("this browser has no WebGPU");
      if ((await gpu.requestAdapter()) === null) throw new Error("this browser offers no WebGPU adapter");
      return import("@tensorflow/tfjs-backend-webgpu");
    },
    webgl: () => import("@tensorflow/tfjs-backend-webgl"),
    wasm: async () => {
      const wasm = await import("@tensorflow/tfjs-backend-wasm");
      wasm.setWasmPaths(options.wasmBase);
      return wasm;
    },
    cpu: cpuBackendLoader,
  };
}
