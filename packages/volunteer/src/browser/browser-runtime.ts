import { benchmarkBackend, selectBackend } from "@barnraise/models";
import { browserBackendLoaders, indexedDbBlobStore } from "@barnraise/models/browser";
import { browserTransports, indexedDbNodeStore, setSolverWasmBase } from "@barnraise/swarm/browser";
import type { VolunteerRuntime } from "../run/volunteer-options.ts";

/**
 * The most a tab lets activations take: a tab shares the browser's memory with every other tab, and
 * the wasm backend's heap is a 32-bit address space shared with the weights.
 */
const TAB_ACTIVATION_BYTES = 256 * 2 ** 20;

/**
 * What a browser tab (a Web Worker of the platform's page) gives the volunteer's run: its identity
 * and authority pin in IndexedDB (`barnraise-node-<identity>`), verified models and shards in
 * IndexedDB (`barnraise-blobs-<cache>-…`, shared by the browser's identities: they hold nothing
 * secret), the browser's TF.js backends (WebGPU, WebGL, wasm from `wasmBase`, plain JavaScript), and
 * WebSockets. The wasm binaries (TF.js's, and the all-reduce's load-balancing solver's) are fetched
 * from `wasmBase`. Nothing here is readable by another origin's pages.
 */
export function browserRuntime(options: {
  readonly identity: string;
  readonly cache: string;
  readonly wasmBase: string;
}): VolunteerRuntime {
  const loaders = browserBackendLoaders({ wasmBase: options.wasmBase });
  setSolverWasmBase(options.wasmBase);
  return {
    nodeStore: indexedDbNodeStore(options.identity),
    blobStore: (store) => indexedDbBlobStore(`${options.cache}-${store}`),
    selectBackend: async (choice) => {
      const selected = await selectBackend(choice, { loaders });
      return { selected, benchmark: selected.benchmark ?? (await benchmarkBackend()) };
    },
    activationMemoryBytes: () => TAB_ACTIVATION_BYTES,
    transports: browserTransports(),
  };
}
