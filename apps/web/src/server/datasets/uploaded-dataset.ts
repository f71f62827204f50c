import type { DatasetManifest } from "../../api/schemas/datasets.ts";
import type { ObjectStore } from "../storage/object-store.ts";
import {
  clearUnpublishedDataset,
  datasetExists,
  DatasetExistsError,
  inScratchDir,
  publishDataset,
} from "./dataset-publish.ts";

/** Progress of a conversion of an uploaded file, reported every so often and once at the end. */
export interface ImportProgress {
  /** Bytes of the file read so far. */
  readonly bytesRead: number;
  /** Records converted so far (train and test). */
  readonly records: number;
}

/**
 * Builds dataset `name` with `convert`, which writes the shards and the manifest into the empty
 * scratch directory it is given, then publishes it to the store (see dataset-publish.ts). A dataset
 * of that name is never replaced: DatasetExistsError, before or after the work. On failure nothing
 * is left behind. The caller makes sure no other build of this name runs at the same time.
 */
export async function buildUploadedDataset<M extends DatasetManifest>(
  storage: ObjectStore,
  name: string,
  convert: (dir: string) => Promise<M>,
): Promise<M> {
  if (await datasetExists(storage, name)) throw new DatasetExistsError(name);
  await clearUnpublishedDataset(storage, name);
  return await inScratchDir(storage, name, async (dir) => {
    const manifest = await convert(dir);
    try {
      await publishDataset(storage, name, dir, manifest, { replace: false });
    } catch (error) {
      // A publish that failed half-way leaves objects without a manifest: removed again.
      await clearUnpublishedDataset(storage, name);
      throw error;
    }
    return manifest;
  });
}
