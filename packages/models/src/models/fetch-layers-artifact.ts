import { LAYERS_MODEL_LIMITS } from "@barnraise/protocol";
import { isTransientStatus, readBody, TransientStatus } from "../data/read-body.ts";
import {
  DEFAULT_RETRY_POLICY,
  describe,
  RetriesExhausted,
  type RetryPolicy,
  withRetry,
} from "../data/retry.ts";
import {
  type LayersArtifact,
  short,
  tampered,
  type VerifiedModelJson,
  verifyModelJson,
  verifyWeights,
} from "./layers-artifact.ts";
import { isModelError, ModelError, ModelErrorCode } from "./model-error.ts";
import type { BlobStore } from "../storage/blob-store.ts";

/** Options of `fetchLayersArtifact`. */
export interface FetchLayersArtifactOptions {
  /** The platform's base URL, e.g. `https://barnraise.example.org`. */
  readonly serverUrl: string;
  /** The model's id: the signed config's `model.sha256`. */
  readonly sha256: string;
  /** Verified files are kept in `cache.within(sha256)`; nothing is cached without it. */
  readonly cache?: BlobStore;
  readonly signal?: AbortSignal;
  /** Progress lines for the volunteer (downloads can take a while). */
  readonly log?: (line: string) => void;
  /** Told when the cache cannot be used; the files are then downloaded. */
  readonly warn?: (message: string, error: unknown) => void;
  /** Injected for tests; defaults to the global `fetch`. */
  readonly fetch?: typeof fetch;
  readonly retry?: RetryPolicy;
}

/**
 * An uploaded model's files, verified against the signed SHA-256 (see `LayersArtifact`): from the
 * cache when its copy still verifies, else from `GET {server}/api/v1/models/{sha256}/model.json`
 * and `…/{weights file}`, retrying network errors and 5xx answers. A cached file that no longer
 * verifies is downloaded again, never trusted. Throws ModelError MODEL_TAMPERED (the platform
 * served other bytes), MODEL_INVALID (the signed bytes are no trainable model) or MODEL_UNAVAILABLE
 * (not found, or unreachable after every retry); an abort of `signal` rejects with its reason.
 */
export async function fetchLayersArtifact(options: FetchLayersArtifactOptions): Promise<LayersArtifact> {
  const { sha256 } = options;
  if (!/^[0-9a-f]{64}$/.test(sha256)) {
    throw new ModelError(
      ModelErrorCode.MODEL_INVALID,
      `the model id ${JSON.stringify(sha256)} is not a hex SHA-256`,
    );
  }
  const log = options.log ?? (() => undefined);
  const cache =
    options.cache === undefined ? undefined : new ArtifactCache(options.cache.within(sha256), options.warn);
  const base = `${options.serverUrl.replace(/\/+$/, "")}/api/v1/models/${sha256}`;
  const download = (file: string, limit: number, tooLong: () => Error) =>
    downloadFile(`${base}/${file}`, sha256, limit, tooLong, options);

  let json = await cache?.modelJson(sha256);
  if (json === undefined) {
    log(`downloading the experiment's model ${short(sha256)} from ${options.serverUrl}`);
    const bytes = await download("model.json", LAYERS_MODEL_LIMITS.modelJsonBytes, () =>
      tampered(
        sha256,
        `model.json is longer than the ${LAYERS_MODEL_LIMITS.modelJsonBytes} bytes a model.json may have`,
      ),
    );
    json = await verifyModelJson(bytes, sha256);
    await cache?.write("model.json", bytes);
  }
  const cached = await cache?.weights(json);
  if (cached !== undefined) {
    log(`model ${short(sha256)}: using the verified copy in ${options.cache?.location ?? ""}`);
    return cached;
  }
  const { weightBytes } = json.model;
  log(
    `downloading the weights of model ${short(sha256)} (${formatBytes(weightBytes)}, ${json.model.parameters} parameters)`,
  );
  const bytes = await download(json.weightsFile, weightBytes, () =>
    tampered(
      sha256,
      `${json.weightsFile} is longer than the ${weightBytes} bytes the signed model.json's weights need`,
    ),
  );
  const artifact = await verifyWeights(json, bytes);
  await cache?.write(json.weightsFile, bytes);
  log(`model ${short(sha256)}: both files match the signed SHA-256`);
  return artifact;
}

/** GET `url` with retries; the body may not exceed `limit` bytes (`tooLong` otherwise). */
async function downloadFile(
  url: string,
  sha256: string,
  limit: number,
  tooLong: () => Error,
  options: FetchLayersArtifactOptions,
): Promise<Uint8Array<ArrayBuffer>> {
  const fetchImpl = options.fetch ?? fetch;
  const { signal } = options;
  try {
    return await withRetry(
      async () => {
        const response = await fetchImpl(url, { signal: signal ?? null });
        if (response.ok) return await readBody(response, limit, tooLong);
        await response.body?.cancel();
        if (isTransientStatus(response.status))
          throw new TransientStatus(`HTTP ${response.status} from ${url}`);
        throw new ModelError(
          ModelErrorCode.MODEL_UNAVAILABLE,
          response.status === 404
            ? `the platform has no model ${short(sha256)} (HTTP 404 from ${url}); the organizer must upload ` +
                "the model again or fix the experiment's config"
            : `could not download model ${short(sha256)}: unexpected HTTP ${response.status} from ${url}`,
        );
      },
      (error) => !isModelError(error),
      options.retry ?? DEFAULT_RETRY_POLICY,
      signal,
    );
  } catch (error) {
    if (!(error instanceof RetriesExhausted)) throw error;
    throw new ModelError(
      ModelErrorCode.MODEL_UNAVAILABLE,
      `could not download model ${short(sha256)} from ${url} after ${error.attempts} attempts ` +
        `(last: ${describe(error.cause)}); check that the platform is reachable and try again`,
      { cause: error.cause },
    );
  }
}

/**
 * A model's verified files in a store (for the CLI peer, `<data dir>/models/<sha256>/`), so a
 * restarted peer does not download them again. Every read is verified like a download: a damaged or edited file is
 * reported and downloaded anew.
 */
class ArtifactCache {
  readonly #store: BlobStore;
  readonly #warn: (message: string, error: unknown) => void;

  constructor(store: BlobStore, warn: ((message: string, error: unknown) => void) | undefined) {
    this.#store = store;
    this.#warn = warn ?? (() => undefined);
  }

  async modelJson(sha256: string): Promise<VerifiedModelJson | undefined> {
    const bytes = await this.#read("model.json");
    if (bytes === undefined) return undefined;
    try {
      return await verifyModelJson(bytes, sha256);
    } catch (error) {
      if (!isModelError(error)) throw error;
      this.#warn(
        `the cached ${this.#store.describe("model.json")} does not verify; downloading it again`,
        error,
      );
      return undefined;
    }
  }

  async weights(json: VerifiedModelJson): Promise<LayersArtifact | undefined> {
    const bytes = await this.#read(json.weightsFile);
    if (bytes === undefined) return undefined;
    try {
      return await verifyWeights(json, bytes);
    } catch (error) {
      if (!isModelError(error)) throw error;
      this.#warn(
        `the cached ${this.#store.describe(json.weightsFile)} does not verify; downloading it again`,
        error,
      );
      return undefined;
    }
  }

  /** Keeps `bytes` as `file`; a failure is only told (the model was downloaded). */
  async write(file: string, bytes: Uint8Array): Promise<void> {
    try {
      await this.#store.put(file, bytes);
    } catch (error) {
      this.#warn(`cannot cache the model in ${this.#store.location}`, error);
    }
  }

  async #read(file: string): Promise<Uint8Array<ArrayBuffer> | undefined> {
    try {
      return await this.#store.get(file);
    } catch (error) {
      this.#warn(`cannot read ${this.#store.describe(file)}`, error);
      return undefined;
    }
  }
}

function formatBytes(bytes: number): string {
  return bytes >= 1 << 20 ? `${(bytes / (1 << 20)).toFixed(1)} MiB` : `${(bytes / 1024).toFixed(1)} KiB`;
}
