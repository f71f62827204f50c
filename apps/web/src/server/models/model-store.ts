import { createHash } from "node:crypto";
import {
  canonicalLayersModelJson,
  checkLayersWeightFiles,
  LAYERS_MODEL_LIMITS,
  LAYERS_WEIGHTS_FILE,
  LayersModelError,
  layersWeightsFileName,
  parseLayersModelJson,
  type LayersModelJson,
} from "@barnraise/protocol";
import { AppError, AppErrorCode } from "../app-error.ts";
import { readObjectIfPresent, type ObjectStore } from "../storage/object-store.ts";

/**
 * Organizers' own models, stored content-addressed in the platform's object store under
 * `models/<sha256>/`: the canonical `model.json` (whose SHA-256 is the model's id) and one
 * `weights-<sha256>.bin` holding every weight, as `canonicalLayersModelJson` describes. The weights
 * are written first and model.json last, each object atomically, so a model whose model.json can be
 * read is always whole; the same upload twice gives the same id and is stored once.
 */

/** An uploaded file, as it came from the form. */
export interface UploadedFile {
  readonly name: string;
  readonly bytes: Uint8Array;
}

/** What the form shows after a model is accepted, and what experiment creation checks against. */
export interface StoredModelSummary {
  readonly sha256: string;
  readonly inputShape: readonly number[];
  readonly outputUnits: number;
  readonly outputActivation: string;
  readonly parameters: number;
  readonly weightBytes: number;
  readonly layers: number;
}

/** A stored model's parsed model.json and the name of its weights file. */
export interface StoredModel {
  readonly sha256: string;
  readonly model: LayersModelJson;
  readonly weightsFile: string;
}

const MODEL_JSON = "model.json";
const SHA256 = /^[0-9a-f]{64}$/;

/** The object key of a stored model's file (model.json or its weights). */
export function storedModelFileKey(sha256: string, file: string): string {
  return `models/${sha256}/${file}`;
}

function invalid(error: LayersModelError): AppError {
  return new AppError(AppErrorCode.INVALID_INPUT, error.message, {
    issues: [{ path: error.file, message: error.message.slice(error.file.length + 2) }],
  });
}

/**
 * Validates an upload (model.json and its weight shards) and stores it. Throws INVALID_INPUT with
 * the offending file as the issue's path: a model.json that does not parse, an unsupported layer,
 * weights that do not fit the manifest, a file over the limits.
 */
export async function storeLayersModel(
  storage: ObjectStore,
  files: readonly UploadedFile[],
): Promise<StoredModelSummary> {
  const modelJson = files.find((file) => file.name === MODEL_JSON);
  if (modelJson === undefined) {
    throw new AppError(AppErrorCode.INVALID_INPUT, "the upload has no model.json", {
      issues: [
        {
          path: MODEL_JSON,
          message: "choose the model.json that tf.LayersModel.save() wrote, with its .bin files",
        },
      ],
    });
  }
  const names = new Set<string>();
  for (const file of files) {
    if (names.has(file.name)) {
      throw new AppError(AppErrorCode.INVALID_INPUT, `${file.name} was uploaded twice`, {
        issues: [{ path: file.name, message: "was uploaded twice" }],
      });
    }
    names.add(file.name);
  }
  let model: LayersModelJson;
  let order: string[];
  try {
    model = parseLayersModelJson(modelJson.bytes);
    order = checkLayersWeightFiles(model, new Map(files.map((file) => [file.name, file.bytes.byteLength])));
  } catch (error) {
    if (error instanceof LayersModelError) throw invalid(error);
    throw error;
  }
  const byName = new Map(files.map((file) => [file.name, file.bytes]));
  const weightsHash = createHash("sha256");
  for (const name of order) weightsHash.update(byName.get(name) ?? new Uint8Array());
  const weightsSha256 = weightsHash.digest("hex");
  const canonical = canonicalLayersModelJson(model, weightsSha256);
  const sha256 = createHash("sha256").update(canonical).digest("hex");
  const summary = summarize(sha256, model);
  const modelKey = storedModelFileKey(sha256, MODEL_JSON);
  if ((await storage.head(modelKey)) !== null) return summary;

  // The weights first, model.json last: a model is there once its model.json is. Another upload of
  // the same model at the same time writes the same bytes under the same keys.
  const weights = await storage.stage(storedModelFileKey(sha256, layersWeightsFileName(weightsSha256)));
  try {
    for (const name of order) await weights.write(byName.get(name) ?? new Uint8Array());
    await weights.commit();
  } finally {
    await weights.discard();
  }
  await storage.put(modelKey, canonical);
  return summary;
}

function summarize(sha256: string, model: LayersModelJson): StoredModelSummary {
  const topology = model.modelTopology;
  const inner = (topology.model_config ?? topology) as { config?: { layers?: unknown[] } | unknown[] };
  const layers = Array.isArray(inner.config) ? inner.config : (inner.config?.layers ?? []);
  return {
    sha256,
    inputShape: model.inputShape,
    outputUnits: model.outputUnits,
    outputActivation: model.outputActivation,
    parameters: model.parameters,
    weightBytes: model.weightBytes,
    layers: Array.isArray(layers) ? layers.length : 0,
  };
}

function notFound(sha256: string): AppError {
  return new AppError(AppErrorCode.NOT_FOUND, `no uploaded model has SHA-256 ${sha256}`);
}

/** A stored model, its model.json parsed again (it was checked when stored). NOT_FOUND if absent. */
export async function readStoredModel(storage: ObjectStore, sha256: string): Promise<StoredModel> {
  if (!SHA256.test(sha256)) throw notFound(sha256);
  const bytes = await readObjectIfPresent(storage, storedModelFileKey(sha256, MODEL_JSON));
  if (bytes === null) throw notFound(sha256);
  const model = parseLayersModelJson(bytes);
  const weightsFile = model.groups[0]?.paths[0] ?? "";
  if (!LAYERS_WEIGHTS_FILE.test(weightsFile)) {
    throw new AppError(AppErrorCode.CONFLICT, `the stored model ${sha256} is not in the canonical form`);
  }
  return { sha256, model, weightsFile };
}

/** The summary of a stored model, for the form and for experiment creation. */
export async function readStoredModelSummary(
  storage: ObjectStore,
  sha256: string,
): Promise<StoredModelSummary> {
  return summarize(sha256, (await readStoredModel(storage, sha256)).model);
}

/**
 * A file of a stored model by name (model.json or its weights), for the public download route. The
 * stored files were checked when stored and are named by their content, so this only looks them up.
 */
export async function getStoredModelFile(
  storage: ObjectStore,
  sha256: string,
  file: string,
): Promise<{ key: string; size: number; contentType: string; etag: string }> {
  const weights = LAYERS_WEIGHTS_FILE.exec(file);
  const missing = () => new AppError(AppErrorCode.NOT_FOUND, `model ${sha256} has no file "${file}"`);
  if (!SHA256.test(sha256) || (file !== MODEL_JSON && weights === null)) throw missing();
  const key = storedModelFileKey(sha256, file);
  const stored = await storage.head(key);
  if (stored === null) throw missing();
  return {
    key,
    size: stored.size,
    contentType: file === MODEL_JSON ? "application/json" : "application/octet-stream",
    etag: weights?.[1] ?? sha256,
  };
}

/** The most bytes one model upload (model.json and all shards, with form overhead) may take. */
export const MAX_MODEL_UPLOAD_BYTES =
  LAYERS_MODEL_LIMITS.modelJsonBytes + LAYERS_MODEL_LIMITS.weightBytes + (1 << 20);
