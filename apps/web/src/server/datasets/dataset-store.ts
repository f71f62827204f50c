import { datasetNameSchema, type DatasetManifest, type DatasetSummary } from "../../api/schemas/datasets.ts";
import { AppError, AppErrorCode } from "../app-error.ts";
import type { ObjectStore } from "../storage/object-store.ts";
import { datasetObjectKey, MANIFEST_FILE, manifestFiles, readManifest } from "./manifest.ts";

/**
 * Read side of the prepared datasets, for the routes: manifests and the files they name, under
 * `datasets/<name>/` in the platform's object store. Only a dataset with a valid manifest counts as
 * prepared, and only the files the manifest names (its shards and vocabulary) are ever served.
 */

const PREPARE_HINT = "run `npm run datasets:prepare` on the platform's host";

function notPrepared(name: string, detail: string): AppError {
  return new AppError(AppErrorCode.NOT_FOUND, `dataset "${name}" ${detail}; ${PREPARE_HINT}`);
}

/** Every prepared dataset, by name. */
export async function listDatasets(storage: ObjectStore): Promise<DatasetSummary[]> {
  const names = (await storage.list("datasets/"))
    .map((object) => object.key.split("/"))
    .filter((parts) => parts.length === 3 && parts[2] === MANIFEST_FILE)
    .map((parts) => parts[1] ?? "");
  const summaries: DatasetSummary[] = [];
  for (const name of names.sort()) {
    // `<name>.tmp` and `<name>.old` (left by earlier versions of the platform) are not dataset names.
    if (!datasetNameSchema.safeParse(name).success) continue;
    const read = await readManifest(storage, name);
    if (read.status !== "ok" || read.manifest.name !== name) continue;
    const { format, formatVersion, description, createdFrom, splits } = read.manifest;
    summaries.push({ name, format, formatVersion, description, createdFrom, splits });
  }
  return summaries;
}

/** The manifest of a prepared dataset, or NOT_FOUND telling the operator how to prepare it. */
export async function getDatasetManifest(storage: ObjectStore, name: string): Promise<DatasetManifest> {
  if (!datasetNameSchema.safeParse(name).success) throw notPrepared(name, "does not exist");
  const read = await readManifest(storage, name);
  if (read.status === "missing") throw notPrepared(name, "is not prepared");
  if (read.status === "invalid") throw notPrepared(name, `has an unreadable manifest (${read.reason})`);
  if (read.manifest.name !== name) throw notPrepared(name, "has a manifest of another dataset");
  return read.manifest;
}

export interface DatasetFile {
  /** The file's object key. */
  readonly key: string;
  readonly size: number;
  readonly sha256: string;
  readonly contentType: string;
}

/**
 * A file of a prepared dataset: one of its shards or its vocabulary, by the exact name in the
 * manifest. Any other name (`manifest.json`, `../x`, `train-00000.bin` of a split with one shard
 * less) is NOT_FOUND, so a request can never reach outside the manifest's files.
 */
export async function getDatasetFile(storage: ObjectStore, name: string, file: string): Promise<DatasetFile> {
  const manifest = await getDatasetManifest(storage, name);
  const listed = manifestFiles(manifest).find((entry) => entry.file === file);
  if (listed === undefined) {
    throw new AppError(AppErrorCode.NOT_FOUND, `dataset "${name}" has no file "${file}"`);
  }
  const key = datasetObjectKey(name, listed.file);
  const size = (await storage.head(key))?.size;
  if (size !== listed.bytes) {
    throw new AppError(
      AppErrorCode.NOT_FOUND,
      `dataset "${name}" has a missing or damaged ${listed.file}; run \`npm run datasets:prepare -- --force\` on the platform's host`,
    );
  }
  return { key, size, sha256: listed.sha256, contentType: listed.contentType };
}
