import type { ModelConfig } from "@barnraise/protocol";
import { AlbertMlm } from "./albert-mlm.ts";
import { fetchLayersArtifact } from "./fetch-layers-artifact.ts";
import { UploadedLayersModel } from "./layers-model.ts";
import { MnistMlp } from "./mnist-mlp.ts";
import { ModelError, ModelErrorCode } from "./model-error.ts";
import type { BlobStore } from "../storage/blob-store.ts";
import type { TrainableModel } from "./trainable-model.ts";

/**
 * Builds the model preset a (parsed, validated) config names. The model allocates TF.js variables
 * on the current backend, so select the backend first; call `dispose()` when done. An uploaded
 * model (`preset: "layers"`) needs its files first: `loadModel` downloads them, this refuses it.
 */
export function createModel(config: ModelConfig): TrainableModel {
  switch (config.preset) {
    case "mnist-mlp":
      return new MnistMlp(config);
    case "albert-mlm":
      return new AlbertMlm(config);
    case "layers":
      throw new ModelError(
        ModelErrorCode.INVALID_CONFIG,
        `model ${config.sha256} is an uploaded model: build it with loadModel, which downloads and verifies its files`,
      );
  }
}

/** Where `loadModel` gets an uploaded model's files from. */
export interface LoadModelOptions {
  /** The platform, which serves uploaded models at `/api/v1/models/{sha256}/…`. */
  readonly server: URL;
  /** Where verified model files are kept (one store per model within it); not kept without it. */
  readonly cache?: BlobStore;
  /** Cancels a download (the start-up's stop). */
  readonly signal?: AbortSignal;
  /** Progress lines for the volunteer. */
  readonly log?: (line: string) => void;
  /** Told when the cache cannot be used. */
  readonly warn?: (message: string, error: unknown) => void;
  /** Injected for tests; defaults to the global `fetch`. */
  readonly fetch?: typeof fetch;
}

/**
 * The model a config names, ready to train on the current backend: a preset as `createModel`
 * builds it, or an uploaded model downloaded from the platform (or the cache) and verified
 * against the config's signed SHA-256 first. Throws ModelError MODEL_TAMPERED, MODEL_INVALID or
 * MODEL_UNAVAILABLE for an uploaded model it cannot use.
 */
export async function loadModel(config: ModelConfig, options: LoadModelOptions): Promise<TrainableModel> {
  if (config.preset !== "layers") return createModel(config);
  const artifact = await fetchLayersArtifact({
    serverUrl: options.server.href,
    sha256: config.sha256,
    ...(options.cache === undefined ? {} : { cache: options.cache }),
    ...(options.signal === undefined ? {} : { signal: options.signal }),
    ...(options.log === undefined ? {} : { log: options.log }),
    ...(options.warn === undefined ? {} : { warn: options.warn }),
    ...(options.fetch === undefined ? {} : { fetch: options.fetch }),
  });
  return UploadedLayersModel.load(config, artifact);
}
