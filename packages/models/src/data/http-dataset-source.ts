import type { DatasetManifest, DatasetShard } from "@barnraise/protocol";
import { DatasetError, DatasetErrorCode } from "./dataset-error.ts";
import type { DatasetSource } from "./dataset-source.ts";
import { parseManifest } from "./parse-manifest.ts";
import { isTransientStatus, readBody, TransientStatus } from "./read-body.ts";
import { sha256Hex } from "./sha256.ts";
import { DEFAULT_RETRY_POLICY, describe, RetriesExhausted, type RetryPolicy, withRetry } from "./retry.ts";

/** The largest manifest this peer reads; a bigger body is refused before it fills memory. */
const MAX_MANIFEST_BYTES = 8 << 20;

/** Options of `HttpDatasetSource`. */
export interface HttpDatasetSourceOptions {
  /** The platform's base URL, e.g. `https://barnraise.example.org`. */
  readonly serverUrl: string;
  /** The dataset's name, e.g. `mnist`. */
  readonly dataset: string;
  /** Injected for tests; defaults to the global `fetch`. */
  readonly fetch?: typeof fetch;
  readonly retry?: RetryPolicy;
}

/**
 * Reads a dataset from the platform (`GET /api/v1/datasets/{name}` and `…/shards/{file}`). Every
 * shard is checked against the manifest's byte length and SHA-256, since the bytes may come through
 * caches and proxies; network errors and 5xx answers are retried with backoff.
 */
export class HttpDatasetSource implements DatasetSource {
  readonly #base: string;
  readonly #dataset: string;
  readonly #fetch: typeof fetch;
  readonly #retry: RetryPolicy;

  constructor(options: HttpDatasetSourceOptions) {
    this.#base = `${options.serverUrl.replace(/\/+$/, "")}/api/v1/datasets/${encodeURIComponent(options.dataset)}`;
    this.#dataset = options.dataset;
    // Bound: a browser refuses a fetch called as another object's method ("Illegal invocation").
    this.#fetch = options.fetch ?? fetch.bind(globalThis);
    this.#retry = options.retry ?? DEFAULT_RETRY_POLICY;
  }

  /** Downloads and validates the manifest; refuses other format versions (FORMAT_UNSUPPORTED). */
  async manifest(signal?: AbortSignal): Promise<DatasetManifest> {
    const body = await this.#download(this.#base, "the manifest", MAX_MANIFEST_BYTES, signal);
    let json: unknown;
    try {
      json = JSON.parse(new TextDecoder().decode(body));
    } catch (error) {
      throw new DatasetError(
        DatasetErrorCode.MANIFEST_INVALID,
        `dataset ${this.#dataset}: the manifest from ${this.#base} is not JSON`,
        { cause: error },
      );
    }
    return parseManifest(json, this.#dataset);
  }

  /** Downloads one shard and checks its size and SHA-256 (SHARD_CORRUPT on mismatch). */
  async shard(shard: DatasetShard, signal?: AbortSignal): Promise<Uint8Array> {
    const url = `${this.#base}/shards/${encodeURIComponent(shard.file)}`;
    const bytes = await this.#download(url, `shard ${shard.file}`, shard.bytes, signal);
    if (bytes.byteLength !== shard.bytes) {
      throw new DatasetError(
        DatasetErrorCode.SHARD_CORRUPT,
        `dataset ${this.#dataset}: shard ${shard.file} has ${bytes.byteLength} bytes, the manifest says ` +
          `${shard.bytes}; the download was truncated or the file changed on the server`,
      );
    }
    const digest = await sha256Hex(bytes);
    if (digest !== shard.sha256) {
      throw new DatasetError(
        DatasetErrorCode.SHARD_CORRUPT,
        `dataset ${this.#dataset}: shard ${shard.file} has SHA-256 ${digest}, the manifest says ` +
          `${shard.sha256}; the file was altered on the way or on the server, so it is not used`,
      );
    }
    return bytes;
  }

  /** GET `url` with retries; the body may not exceed `limit` bytes (a longer one is corrupt). */
  async #download(
    url: string,
    what: string,
    limit: number,
    signal?: AbortSignal,
  ): Promise<Uint8Array<ArrayBuffer>> {
    try {
      return await withRetry(
        async () => {
          const response = await this.#fetch(url, { signal: signal ?? null });
          if (response.ok) return await readBody(response, limit, () => this.#tooLong(what, limit));
          await response.body?.cancel();
          if (isTransientStatus(response.status)) {
            throw new TransientStatus(`HTTP ${response.status} from ${url}`);
          }
          if (response.status === 404) {
            throw new DatasetError(
              DatasetErrorCode.NOT_FOUND,
              `dataset ${this.#dataset}: ${what} is not on the server (HTTP 404 from ${url}); ` +
                `the platform's operator must run \`npm run datasets:prepare\``,
            );
          }
          throw new DatasetError(
            DatasetErrorCode.HTTP_ERROR,
            `dataset ${this.#dataset}: ${what}: unexpected HTTP ${response.status} from ${url}`,
          );
        },
        (error) => !(error instanceof DatasetError),
        this.#retry,
        signal,
      );
    } catch (error) {
      if (!(error instanceof RetriesExhausted)) throw error;
      throw new DatasetError(
        DatasetErrorCode.DOWNLOAD_FAILED,
        `dataset ${this.#dataset}: could not download ${what} from ${url} after ${error.attempts} attempts ` +
          `(last: ${describe(error.cause)}); check that the platform is reachable and try again`,
        { cause: error.cause },
      );
    }
  }

  #tooLong(what: string, limit: number): DatasetError {
    return new DatasetError(
      DatasetErrorCode.SHARD_CORRUPT,
      `dataset ${this.#dataset}: ${what} is longer than the ${limit} bytes expected; refusing the rest`,
    );
  }
}
