import { readdir, stat } from "node:fs/promises";
import { join } from "node:path";
import { datasetNameSchema, type DatasetManifest, type DatasetSummary } from "../../api/schemas/datasets.ts";
import { AppError, AppErrorCode } from "../app-error.ts";
import { manifestFiles, readManifestFile } from "./manifest.ts";

/**
 * Read side of the prepared datasets, for the routes: manifests and the files they name, under
 * `<data dir>/datasets/<name>/`. Only a directory with a valid manifest counts as prepared, and only
 * the files the manifest names (its shards and vocabulary) are ever served.
 */

const PREPARE_HINT = "run `npm run datasets:prepare` on the platform's host";

function datasetsRoot(dataDir: string): string {
  return join(dataDir, "datasets");
}

function notPrepared(name: string, detail: string): AppError {
  return new AppError(AppErrorCode.NOT_FOUND, `dataset "${name}" ${detail}; ${PREPARE_HINT}`);
}

/** Every prepared dataset, by name. */
export async function listDatasets(dataDir: string): Promise<DatasetSummary[]> {
  let names: string[];
  try {
    names = await readdir(datasetsRoot(dataDir));
  } catch (error) {
    if (error instanceof Error && "code" in error && error.code === "ENOENT") return [];
    throw error;
  }
  const summaries: DatasetSummary[] = [];
  for (const name of names.sort()) {
    // `<name>.tmp` and `<name>.old` (an unfinished or replaced preparation) are not dataset names.
    if (!datasetNameSchema.safeParse(name).success) continue;
    const read = await readManifestFile(join(datasetsRoot(dataDir), name));
    if (read.status !== "ok" || read.manifest.name !== name) continue;
    const { format, formatVersion, description, createdFrom, splits } = read.manifest;
    summaries.push({ name, format, formatVersion, description, createdFrom, splits });
  }
  return summaries;
}

/** The manifest of a prepared dataset, or NOT_FOUND telling the operator how to prepare it. */
export async function getDatasetManifest(dataDir: string, name: string): Promise<DatasetManifest> {
  if (!datasetNameSchema.safeParse(name).success) throw notPrepared(name, "does not exist");
  const read = await readManifestFile(join(datasetsRoot(dataDir), name));
  if (read.status === "missing") throw notPrepared(name, "is not prepared");
  if (read.status === "invalid") throw notPrepared(name, `has an unreadable manifest (${read.reason})`);
  if (read.manifest.name !== name) throw notPrepared(name, "has a manifest of another dataset");
  return read.manifest;
}

export interface DatasetFile {
  readonly path: string;
  readonly size: number;
  readonly sha256: string;
  readonly contentType: string;
}

/**
 * A file of a prepared dataset: one of its shards or its vocabulary, by the exact name in the
 * manifest. Any other name (`manifest.json`, `../x`, `train-00000.bin` of a split with one shard
 * less) is NOT_FOUND, so a request can never reach outside the manifest's files.
 */
export async function getDatasetFile(dataDir: string, name: string, file: string): Promise<DatasetFile> {
  const manifest = await getDatasetManifest(dataDir, name);
  const listed = manifestFiles(manifest).find((entry) => entry.file === file);
  if (listed === undefined) {
    throw new AppError(AppErrorCode.NOT_FOUND, `dataset "${name}" has no file "${file}"`);
  }
  const path = join(datasetsRoot(dataDir), name, listed.file);
  const size = await fileSize(path);
  if (size !== listed.bytes) {
    throw new AppError(
      AppErrorCode.NOT_FOUND,
      `dataset "${name}" has a missing or damaged ${listed.file}; run \`npm run datasets:prepare -- --force\` on the platform's host`,
    );
  }
  return { path, size, sha256: listed.sha256, contentType: listed.contentType };
}

async function fileSize(path: string): Promise<number | undefined> {
  try {
    const info = await stat(path);
    return info.isFile() ? info.size : undefined;
  } catch (error) {
    if (error instanceof Error && "code" in error && error.code === "ENOENT") return undefined;
    throw error;
  }
}
