import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { benchmarkBackend, type BackendBenchmark } from "../tf/benchmark-backend.ts";
import {
  cpuBackendLoader,
  selectBackend,
  type BackendChoice,
  type BackendLoaders,
  type SelectedBackend,
} from "../tf/backend.ts";
import { createWebGpuLoader, type DawnAddonSource } from "./webgpu.ts";

/**
 * The TF.js backends of a Node.js program: native TensorFlow (tfjs-node, tfjs-node-gpu) when
 * installed, WebGPU on Dawn's Node binding, WebAssembly and plain JavaScript.
 */

/**
 * Directory (with a trailing separator) holding the wasm backend's `.wasm` binaries.
 *
 * In Node the package's `main` is the CommonJS bundle `dist/tf-backend-wasm.node.js`, whose
 * Emscripten glue reads `tfjs-backend-wasm{,-simd}.wasm` from its own `__dirname` with `fs`. That
 * breaks as soon as the peer is bundled, so the directory is passed explicitly to `setWasmPaths`:
 * beside this module when the binaries are there (the bundled program the platform serves ships
 * them next to its `cli.js`), else the installed package's `dist/` (a clone). Node has no
 * worker-based threads here, so the threaded binary is never used.
 */
export function resolveWasmDirectory(): string {
  const beside = fileURLToPath(new URL(".", import.meta.url));
  if (existsSync(join(beside, "tfjs-backend-wasm.wasm"))) return beside.endsWith(sep) ? beside : beside + sep;
  const entry = createRequire(import.meta.url).resolve("@tensorflow/tfjs-backend-wasm");
  const directory = dirname(entry);
  if (!existsSync(join(directory, "tfjs-backend-wasm.wasm"))) {
    throw new Error(
      `tfjs-backend-wasm.wasm is missing from ${directory}; reinstall @tensorflow/tfjs-backend-wasm`,
    );
  }
  return directory + sep;
}

/** Imports a package that may legitimately be absent; the specifier is a variable so tsc allows it. */
async function importOptional(packageName: string): Promise<unknown> {
  return (await import(/* @vite-ignore */ packageName)) as unknown;
}

/** The real loaders: dynamic imports of the backend packages (WebGL is a browser's, not Node.js's). */
export const nodeBackendLoaders: Omit<BackendLoaders, "webgl"> = {
  gpu: () => importOptional("@tensorflow/tfjs-node-gpu"),
  webgpu: createWebGpuLoader(),
  node: () => importOptional("@tensorflow/tfjs-node"),
  wasm: async () => {
    const wasm = await import("@tensorflow/tfjs-backend-wasm");
    wasm.setWasmPaths(resolveWasmDirectory());
    return wasm;
  },
  cpu: cpuBackendLoader,
};

/**
 * Selects `choice` among the backends of Node.js (`selectBackend` with `nodeBackendLoaders`);
 * `loaders` replaces some of them (tests simulate missing or broken packages).
 */
export function selectNodeBackend(
  choice: BackendChoice,
  options: {
    readonly loaders?: Partial<BackendLoaders>;
    readonly measure?: () => Promise<BackendBenchmark>;
  } = {},
): Promise<SelectedBackend> {
  return selectBackend(choice, {
    loaders: { ...nodeBackendLoaders, ...options.loaders },
    ...(options.measure === undefined ? {} : { measure: options.measure }),
  });
}

/**
 * Selects `choice` as a peer joined to a platform does (the peer and its doctor): where the WebGPU
 * binding is not installed it comes from the platform's catalog (`addon`). Returns the selection
 * and its speed: the one "auto" measured, else a fresh benchmark.
 */
export async function selectPeerBackend(
  choice: BackendChoice,
  addon: DawnAddonSource,
): Promise<{ selected: SelectedBackend; benchmark: BackendBenchmark }> {
  const selected = await selectNodeBackend(choice, { loaders: { webgpu: createWebGpuLoader({ addon }) } });
  return { selected, benchmark: selected.benchmark ?? (await benchmarkBackend()) };
}
