import { rename, rm, stat } from "node:fs/promises";
import { join } from "node:path";

/**
 * The directories of one dataset under `<data dir>/datasets/`: where it is served from, where a new
 * version is built, and where the version it replaces waits while the two are swapped. A dataset is
 * always built in `<name>.tmp/` (shards fsynced, manifest last) and renamed into place, so a killed
 * build never leaves a half-written dataset where the platform serves it. Neither suffix passes
 * `datasetNameSchema`, so the listing never shows them. Shared by `npm run datasets:prepare` and
 * the imports of uploaded files.
 */
export interface DatasetDirs {
  readonly final: string;
  readonly temp: string;
  readonly previous: string;
}

export function datasetDirs(root: string, name: string): DatasetDirs {
  return {
    final: join(root, name),
    temp: join(root, `${name}.tmp`),
    previous: join(root, `${name}.old`),
  };
}

/**
 * Clears what an interrupted build left: a `<name>.old` without `<name>` (a kill between the two
 * renames of `installDataset`) is put back, then any `.old` and `.tmp` are removed. Only call it
 * when no other build of this name is running.
 */
export async function recoverDatasetDirs(dirs: DatasetDirs): Promise<void> {
  if (!(await pathExists(dirs.final)) && (await pathExists(dirs.previous))) {
    await rename(dirs.previous, dirs.final);
  }
  await rm(dirs.previous, { recursive: true, force: true });
  await rm(dirs.temp, { recursive: true, force: true });
}

export class DatasetExistsError extends Error {
  override readonly name = "DatasetExistsError";
  readonly dataset: string;

  constructor(dataset: string) {
    super(`a dataset named "${dataset}" already exists`);
    this.dataset = dataset;
  }
}

/**
 * Moves the finished `<name>.tmp/` into place. With `replace`, a current version is first moved to
 * `<name>.old/` and deleted after the swap; without it, an existing dataset is never touched and
 * DatasetExistsError is thrown (the `.tmp` stays for the caller to remove).
 */
export async function installDataset(
  dirs: DatasetDirs,
  name: string,
  options: { readonly replace: boolean },
): Promise<void> {
  if (await pathExists(dirs.final)) {
    if (!options.replace) throw new DatasetExistsError(name);
    await rename(dirs.final, dirs.previous);
  }
  await rename(dirs.temp, dirs.final);
  await rm(dirs.previous, { recursive: true, force: true });
}

export async function pathExists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch {
    return false;
  }
}
