import { mkdir, rm } from "node:fs/promises";
import type { DatasetManifest } from "../../api/schemas/datasets.ts";
import { datasetDirs, DatasetExistsError, installDataset, pathExists } from "./dataset-dir.ts";
import { datasetsDir } from "./prepare-datasets.ts";

/** Progress of a conversion of an uploaded file, reported every so often and once at the end. */
export interface ImportProgress {
  /** Bytes of the file read so far. */
  readonly bytesRead: number;
  /** Records converted so far (train and test). */
  readonly records: number;
}

/**
 * Builds dataset `name` of `<data dir>/datasets/` with `convert`, which writes the shards and the
 * manifest into the empty directory it is given (`<name>.tmp/`), then renames it into place. A
 * dataset of that name is never replaced: DatasetExistsError, before or after the work. On failure
 * nothing is left behind. The caller makes sure no other build of this name runs at the same time.
 */
export async function buildUploadedDataset<M extends DatasetManifest>(
  dataDir: string,
  name: string,
  convert: (dir: string) => Promise<M>,
): Promise<M> {
  const root = datasetsDir(dataDir);
  await mkdir(root, { recursive: true });
  const dirs = datasetDirs(root, name);
  if (await pathExists(dirs.final)) throw new DatasetExistsError(name);
  await rm(dirs.temp, { recursive: true, force: true });
  await mkdir(dirs.temp);
  try {
    const manifest = await convert(dirs.temp);
    await installDataset(dirs, name, { replace: false });
    return manifest;
  } catch (error) {
    await rm(dirs.temp, { recursive: true, force: true });
    throw error;
  }
}
