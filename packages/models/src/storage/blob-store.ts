/**
 * Bytes a node keeps by name across runs of its program: its caches of verified model files and
 * dataset shards. The Node programs keep them in a directory (`directoryStore` in
 * `@barnraise/models/node`); a browser tab would keep them in its origin's storage.
 */
export interface BlobStore {
  /** Where the store is, as messages name it (a directory). */
  readonly location: string;
  /** Where `name` is kept, as messages name it (a file path). */
  describe(name: string): string;
  /** The bytes kept as `name`; undefined when there are none. Rejects when they cannot be read. */
  get(name: string): Promise<Uint8Array<ArrayBuffer> | undefined>;
  /** Keeps `bytes` as `name`, replacing what was there: whole or not at all. Rejects on failure. */
  put(name: string, bytes: Uint8Array): Promise<void>;
  /** The store of the names under `name` (a subdirectory). */
  within(name: string): BlobStore;
}
