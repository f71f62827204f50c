import { type ModelConfig, taskChoices, UPLOADED_MODEL } from "@barnraise/protocol";
import { AlbertMlm } from "./albert-mlm.ts";
import { albertMlmKind } from "./albert-mlm-kind.ts";
import { fetchLayersArtifact } from "./fetch-layers-artifact.ts";
import { UploadedLayersModel } from "./layers-model.ts";
import { MnistMlp } from "./mnist-mlp.ts";
import { mnistMlpKind } from "./mnist-mlp-kind.ts";
import { ModelError, ModelErrorCode } from "./model-error.ts";
import type { ModelKind } from "./model-kind.ts";
import type { BlobStore } from "../storage/blob-store.ts";
import type { TrainableModel, UploadedModelShape } from "./trainable-model.ts";
import { uploadedModelKind } from "./uploaded-model-kind.ts";

/**
 * The one place in the package that tells the kinds of model apart (`model.kind` of the config):
 * which class builds a model, how it is loaded, and which `ModelKind` it has. Everything else asks
 * the built model (`TrainableModel.kind`) or the kind. A new kind is a model class, a kind file and
 * a case in each function here.
 */

/**
 * Builds the built-in model a (parsed, validated) config names. The model allocates TF.js variables
 * on the current backend, so select the backend first; call `dispose()` when done. An uploaded
 * model (`kind: "uploaded"`) needs its files first: `loadModel` downloads them, this refuses it.
 */
export function createModel(config: ModelConfig): TrainableModel {
  switch (config.kind) {
    case "mnist-mlp":
      return new MnistMlp(config);
    case "albert-mlm":
      return new AlbertMlm(config);
    case UPLOADED_MODEL:
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
 * The model a config names, ready to train on the current backend: a built-in one as `createModel`
 * builds it, or an uploaded model downloaded from the platform (or the cache) and verified
 * against the config's signed SHA-256 first. Throws ModelError MODEL_TAMPERED, MODEL_INVALID or
 * MODEL_UNAVAILABLE for an uploaded model it cannot use.
 */
export async function loadModel(config: ModelConfig, options: LoadModelOptions): Promise<TrainableModel> {
  if (config.kind !== UPLOADED_MODEL) return createModel(config);
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

/**
 * The kind of the model `config` names, without building the model (a built model has its own,
 * `TrainableModel.kind`). An uploaded model's kind needs its shape, which only the built model knows
 * (`UploadedModelShape`): without `shape` it is a RangeError.
 */
export function modelKindOf(config: ModelConfig, shape?: UploadedModelShape): ModelKind {
  if (config.kind === "mnist-mlp") return mnistMlpKind(config);
  if (config.kind === "albert-mlm") return albertMlmKind(config);
  if (shape === undefined) {
    throw new RangeError("an uploaded model's kind needs its shape: use the built model's `kind`");
  }
  return uploadedModelKind(config, shape);
}

/**
 * The model config to evaluate with: an uploaded model reports every metric of its task, so a
 * regression's mean absolute error is there even when the organizer chose only the squared error.
 */
export function heldOutModelConfig(model: ModelConfig): ModelConfig {
  if (model.kind !== UPLOADED_MODEL) return model;
  return { ...model, metrics: [...taskChoices[model.task].metrics] };
}
