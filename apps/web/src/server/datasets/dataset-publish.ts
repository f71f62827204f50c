import { mkdir, rm } from "node:fs/promises";
import { join } from "node:path";
import type { DatasetManifest } from "../../api/schemas/datasets.ts";
import { removePrefix, type ObjectStore } from "../storage/object-store.ts";
import { stagingName } from "../storage/staging-dir.ts";
import { datasetObjectKey, MANIFEST_FILE, manifestFiles } from "./manifest.ts";

/**
 * How a dataset gets into the object store, shared by `npm run datasets:prepare` and the imports of
 * uploaded files. A dataset is built on local disk, in a scratch directory of the store's (shards
 * fsynced, manifest last), then published: each file it lists is put under `datasets/<name>/`, and
 * its manifest last. Only a dataset whose manifest is in the store exists (it is listed and served),
 * so a build or a publish that dies half-way never shows, and its leftovers (objects without a
 * manifest) are removed before the next build of that name. A scratch directory whose process is
 * gone is removed when the store is next opened.
 */

export class DatasetExistsError extends Error {
  override readonly name = "DatasetExistsError";
  readonly dataset: string;

  constructor(dataset: string) {
    super(`a dataset named "${dataset}" already exists`);
    this.dataset = dataset;
  }
}

/** Whether dataset `name` is published (its manifest is in the store). */
export async function datasetExists(storage: ObjectStore, name: string): Promise<boolean> {
  return (await storage.head(datasetObjectKey(name, MANIFEST_FILE))) !== null;
}

/**
 * Removes what an interrupted publish of dataset `name` left: its objects, when it has no manifest.
 * Only call it when no other build of this name is running.
 */
export async function clearUnpublishedDataset(storage: ObjectStore, name: string): Promise<void> {
  if (await datasetExists(storage, name)) return;
  await removePrefix(storage, `datasets/${name}/`);
}

/** Runs `build` in a new, empty scratch directory, which is removed afterwards, whatever happens. */
export async function inScratchDir<T>(
  storage: ObjectStore,
  name: string,
  build: (dir: string) => Promise<T>,
): Promise<T> {
  const dir = join(storage.scratchDir, stagingName(`-${name}`));
  await mkdir(dir);
  try {
    return await build(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * Publishes the dataset built in `dir` (the files `manifest` lists, and `manifest.json`) as dataset
 * `name`. With `replace`, a current version is first unpublished (its manifest removed, so it is not
 * served half-replaced) and its files that the new version does not have are deleted; without it, an
 * existing dataset is never touched and DatasetExistsError is thrown.
 */
export async function publishDataset(
  storage: ObjectStore,
  name: string,
  dir: string,
  manifest: DatasetManifest,
  options: { readonly replace: boolean },
): Promise<void> {
  const manifestKey = datasetObjectKey(name, MANIFEST_FILE);
  if ((await storage.head(manifestKey)) !== null) {
    if (!options.replace) throw new DatasetExistsError(name);
    await storage.remove(manifestKey);
  }
  const files = manifestFiles(manifest);
  const keep = new Set(files.map((file) => datasetObjectKey(name, file.file)));
  for (const object of await storage.list(`datasets/${name}/`)) {
    if (!keep.has(object.key)) await storage.remove(object.key);
  }
  for (const file of files) await storage.putFile(datasetObjectKey(name, file.file), join(dir, file.file));
  await storage.putFile(manifestKey, join(dir, MANIFEST_FILE));
}
