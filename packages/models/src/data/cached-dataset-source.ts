import type { DatasetManifest, DatasetShard } from "@barnraise/protocol";
import type { BlobStore } from "../storage/blob-store.ts";
import type { DatasetSource } from "./dataset-source.ts";
import { sha256Hex } from "./sha256.ts";

/** Told when the cache cannot be read or written; the shard is then served from the source. */
export type CacheWarning = (message: string, error: unknown) => void;

/**
 * Keeps verified shards in `store` (for the CLI peer, a directory under `--data-dir`), so a restarted peer reads them locally instead of
 * downloading them again. Shards are named by their SHA-256, so a changed dataset never serves a
 * stale shard, and a cached one is checked against the manifest again before use: a damaged or
 * edited one is downloaded anew. The manifest itself always comes from the source.
 */
export class CachedDatasetSource implements DatasetSource {
  readonly #source: DatasetSource;
  readonly #store: BlobStore;
  readonly #warn: CacheWarning;

  constructor(source: DatasetSource, store: BlobStore, warn: CacheWarning = () => undefined) {
    this.#source = source;
    this.#store = store;
    this.#warn = warn;
  }

  manifest(signal?: AbortSignal): Promise<DatasetManifest> {
    return this.#source.manifest(signal);
  }

  async shard(shard: DatasetShard, signal?: AbortSignal): Promise<Uint8Array> {
    if (!/^[0-9a-f]{64}$/.test(shard.sha256)) return this.#source.shard(shard, signal);
    const name = `${shard.sha256}.shard`;
    const cached = await this.#read(name, shard);
    if (cached !== undefined) return cached;
    const bytes = await this.#source.shard(shard, signal);
    try {
      await this.#store.put(name, bytes);
    } catch (error) {
      this.#warn(`cannot cache a shard in ${this.#store.location}`, error);
    }
    return bytes;
  }

  async #read(name: string, shard: DatasetShard): Promise<Uint8Array | undefined> {
    let bytes: Uint8Array<ArrayBuffer> | undefined;
    try {
      bytes = await this.#store.get(name);
    } catch (error) {
      this.#warn(`cannot read ${this.#store.describe(name)}`, error);
      return undefined;
    }
    if (bytes === undefined) return undefined;
    if (bytes.byteLength === shard.bytes && (await sha256Hex(bytes)) === shard.sha256) return bytes;
    this.#warn(
      `cached shard ${this.#store.describe(name)} does not match the manifest; downloading it again`,
      undefined,
    );
    return undefined;
  }
}
