import { parseExperimentConfig } from "@barnraise/protocol";
import { createModel, modelKindOf } from "../../src/models/model-kinds.ts";
import { syntheticBatch } from "../../src/data/synthetic-batch.ts";
import { browserBackendLoaders } from "../../src/browser/browser-backends.ts";
import { indexedDbBlobStore } from "../../src/browser/indexeddb-blob-store.ts";
import { cpuBackendLoader, describeBackend, selectBackend } from "../../src/tf/backend.ts";

/**
 * The models in a web page, for the browser tests: bundled for the browser with esbuild and driven
 * through `globalThis.browserModels`.
 */
const browserModels = {
  autoBackend: (wasmBase: string) => autoBackend(wasmBase),
  /** Writes `bytes` as `path` (names joined by "/", the last the blob's) in the blob store `name`. */
  async putBlob(name: string, path: string[], bytes: number[]): Promise<string> {
    const store = path.slice(0, -1).reduce((within, part) => within.within(part), indexedDbBlobStore(name));
    await store.put(path.at(-1) ?? "", new Uint8Array(bytes));
    return store.describe(path.at(-1) ?? "");
  },
  async getBlob(name: string, path: string[]): Promise<number[] | undefined> {
    const store = path.slice(0, -1).reduce((within, part) => within.within(part), indexedDbBlobStore(name));
    const bytes = await store.get(path.at(-1) ?? "");
    return bytes === undefined ? undefined : Array.from(bytes);
  },
  /**
   * Selects `backend` (the wasm binaries from `wasmBase`), builds the default mnist-mlp at its
   * initial parameters of `seed`, and computes the loss and gradient of a stand-in batch.
   */
  async gradient(
    backend: "wasm" | "cpu",
    wasmBase: string,
    seed: number,
  ): Promise<{ backend: string; loss: number; gradient: number[] }> {
    const selected = await selectBackend(backend, {
      loaders: {
        wasm: async () => {
          const wasm = await import("@tensorflow/tfjs-backend-wasm");
          wasm.setWasmPaths(wasmBase);
          return wasm;
        },
        cpu: cpuBackendLoader,
      },
    });
    const config = parseExperimentConfig({}).model;
    const model = createModel(config);
    try {
      model.setParameters(model.initialParameters(seed));
      const result = await model.computeGradients(syntheticBatch(modelKindOf(config), 64, seed), seed);
      return { backend: selected.name, loss: result.loss, gradient: Array.from(result.gradient) };
    } finally {
      model.dispose();
    }
  },
};

export type BrowserModels = typeof browserModels;

/** Selects "auto" among the browser's backends, as a volunteer's tab does; the line it reports. */
async function autoBackend(wasmBase: string): Promise<{ name: string; skipped: string[]; line: string }> {
  const selected = await selectBackend("auto", { loaders: browserBackendLoaders({ wasmBase }) });
  return {
    name: selected.name,
    skipped: selected.skipped.map((skipped) => `${skipped.name}: ${skipped.reason}`),
    line: describeBackend(selected, selected.benchmark),
  };
}

(globalThis as { browserModels?: BrowserModels }).browserModels = browserModels;
