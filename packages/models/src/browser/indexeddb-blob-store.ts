import { createStore, get, set, type UseStore } from "idb-keyval";
import type { BlobStore } from "../storage/blob-store.ts";

/**
 * A browser's blob store (see `BlobStore`): verified model files and dataset shards in IndexedDB,
 * database `barnraise-blobs-<name>`, one record per name (a store `within` a name keeps its names
 * under that prefix). Each write is one transaction, so a closed tab never leaves half a shard.
 */
export function indexedDbBlobStore(name: string): BlobStore {
  const database = `barnraise-blobs-${name}`;
  return storeAt(database, createStore(database, "blobs"), "");
}

function storeAt(database: string, store: UseStore, prefix: string): BlobStore {
  return {
    location: `IndexedDB ${database}${prefix === "" ? "" : ` (${prefix})`}`,
    describe: (name) => `IndexedDB ${database} (${prefix}${name})`,
    get: async (name) => {
      const value: unknown = await get(prefix + name, store);
      if (value === undefined) return undefined;
      if (!(value instanceof Uint8Array))
        throw new Error(`IndexedDB ${database} holds no bytes as ${prefix}${name}`);
      return new Uint8Array(value);
    },
    put: (name, bytes) => set(prefix + name, new Uint8Array(bytes), store),
    within: (name) => storeAt(database, store, `${prefix}${name}/`),
  };
}
