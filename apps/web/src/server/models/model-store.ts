import { createHash, randomBytes } from "node:crypto";
import { mkdir, open, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
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

/**
 * Organizers' own models, stored content-addressed under `<data dir>/models/<sha256>/`: the
 * canonical `model.json` (whose SHA-256 is the directory's name and the model's id) and one
 * `weights-<sha256>.bin` holding every weight, as `canonicalLayersModelJson` describes. A model is
 * written into a temporary directory and renamed into place, so a listed model is always whole; the
 * same upload twice gives the same id and is stored once.
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

/** A stored model's files and parsed model.json. */
export interface StoredModel {
  readonly sha256: string;
  readonly dir: string;
  readonly model: LayersModelJson;
  readonly weightsFile: string;
}

const MODEL_JSON = "model.json";
const SHA256 = /^[0-9a-f]{64}$/;

function modelsRoot(dataDir: string): string {
  return join(dataDir, "models");
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
  dataDir: string,
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
  const dir = join(modelsRoot(dataDir), sha256);
  if (await isDirectory(dir)) return summary;

  const temporary = join(modelsRoot(dataDir), `.${sha256}.${randomBytes(6).toString("hex")}.tmp`);
  await mkdir(temporary, { recursive: true });
  try {
    const weights = await open(join(temporary, layersWeightsFileName(weightsSha256)), "w");
    try {
      for (const name of order) await weights.write(byName.get(name) ?? new Uint8Array());
      await weights.sync();
    } finally {
      await weights.close();
    }
    await writeFile(join(temporary, MODEL_JSON), canonical, { flush: true });
    try {
      await rename(temporary, dir);
    } catch (error) {
      // Another upload of the same model won the race: its files are the same bytes.
      if (!(await isDirectory(dir))) throw error;
    }
  } finally {
    await rm(temporary, { recursive: true, force: true });
  }
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
export async function readStoredModel(dataDir: string, sha256: string): Promise<StoredModel> {
  if (!SHA256.test(sha256)) throw notFound(sha256);
  const dir = join(modelsRoot(dataDir), sha256);
  let bytes: Uint8Array;
  try {
    bytes = await readFile(join(dir, MODEL_JSON));
  } catch (error) {
    if (error instanceof Error && "code" in error && error.code === "ENOENT") throw notFound(sha256);
    throw error;
  }
  const model = parseLayersModelJson(bytes);
  const weightsFile = model.groups[0]?.paths[0] ?? "";
  if (!LAYERS_WEIGHTS_FILE.test(weightsFile)) {
    throw new AppError(AppErrorCode.CONFLICT, `the stored model ${sha256} is not in the canonical form`);
  }
  return { sha256, dir, model, weightsFile };
}

/** The summary of a stored model, for the form and for experiment creation. */
export async function readStoredModelSummary(dataDir: string, sha256: string): Promise<StoredModelSummary> {
  return summarize(sha256, (await readStoredModel(dataDir, sha256)).model);
}

/**
 * A file of a stored model by name (model.json or its weights), for the public download route. The
 * stored files were checked when stored and are named by their content, so this only looks them up.
 */
export async function getStoredModelFile(
  dataDir: string,
  sha256: string,
  file: string,
): Promise<{ path: string; size: number; contentType: string; etag: string }> {
  const weights = LAYERS_WEIGHTS_FILE.exec(file);
  if (!SHA256.test(sha256) || (file !== MODEL_JSON && weights === null)) {
    throw new AppError(AppErrorCode.NOT_FOUND, `model ${sha256} has no file "${file}"`);
  }
  const path = join(modelsRoot(dataDir), sha256, file);
  let size: number;
  try {
    size = (await stat(path)).size;
  } catch (error) {
    if (error instanceof Error && "code" in error && error.code === "ENOENT") {
      throw new AppError(AppErrorCode.NOT_FOUND, `model ${sha256} has no file "${file}"`);
    }
    throw error;
  }
  return {
    path,
    size,
    contentType: file === MODEL_JSON ? "application/json" : "application/octet-stream",
    etag: weights?.[1] ?? sha256,
  };
}

/** The most bytes one model upload (model.json and all shards, with form overhead) may take. */
export const MAX_MODEL_UPLOAD_BYTES =
  LAYERS_MODEL_LIMITS.modelJsonBytes + LAYERS_MODEL_LIMITS.weightBytes + (1 << 20);

async function isDirectory(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isDirectory();
  } catch (error) {
    if (error instanceof Error && "code" in error && error.code === "ENOENT") return false;
    throw error;
  }
}
