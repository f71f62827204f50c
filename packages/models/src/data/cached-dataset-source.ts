import { randomBytes } from "node:crypto";
import { mkdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { DatasetManifest, DatasetShard } from "@barnraise/protocol";
import type { DatasetSource } from "./dataset-source.ts";
import { sha256Hex } from "./sha256.ts";

/** Told when the cache cannot be read or written; the shard is then served from the source. */
export type CacheWarning = (message: string, error: unknown) => void;

/**
 * Keeps verified shards on disk (`--data-dir`), so a restarted peer reads them locally instead of
 * downloading them again. Files are named by their SHA-256, so a changed dataset never serves a
 * stale shard, and a cached file is checked against the manifest again before use: a damaged or
 * edited file is downloaded anew. The manifest itself always comes from the source.
 */
export class CachedDatasetSource implements DatasetSource {
  readonly #source: DatasetSource;
  readonly #directory: string;
  readonly #warn: CacheWarning;

  constructor(source: DatasetSource, directory: string, warn: CacheWarning = () => undefined) {
    this.#source = source;
    this.#directory = directory;
    this.#warn = warn;
  }

  manifest(signal?: AbortSignal): Promise<DatasetManifest> {
    return this.#source.manifest(signal);
  }

  async shard(shard: DatasetShard, signal?: AbortSignal): Promise<Uint8Array> {
    if (!/^[0-9a-f]{64}$/.test(shard.sha256)) return this.#source.shard(shard, signal);
    const path = join(this.#directory, `${shard.sha256}.shard`);
    const cached = await this.#read(path, shard);
    if (cached !== undefined) return cached;
    const bytes = await this.#source.shard(shard, signal);
    await this.#write(path, bytes);
    return bytes;
  }

  async #read(path: string, shard: DatasetShard): Promise<Uint8Array | undefined> {
    let bytes: Uint8Array<ArrayBuffer>;
    try {
      bytes = new Uint8Array(await readFile(path));
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "ENOENT") this.#warn(`cannot read ${path}`, error);
      return undefined;
    }
    if (bytes.byteLength === shard.bytes && (await sha256Hex(bytes)) === shard.sha256) return bytes;
    this.#warn(`cached shard ${path} does not match the manifest; downloading it again`, undefined);
    return undefined;
  }

  /** Writes through a temporary file and a rename, so a crash never leaves half a shard. */
  async #write(path: string, bytes: Uint8Array): Promise<void> {
    const temporary = `${path}.${randomBytes(6).toString("hex")}.tmp`;
    try {
      await mkdir(this.#directory, { recursive: true });
      await writeFile(temporary, bytes);
      await rename(temporary, path);
    } catch (error) {
      this.#warn(`cannot cache a shard in ${this.#directory}`, error);
      await rm(temporary, { force: true }).catch(() => undefined);
    }
  }
}
