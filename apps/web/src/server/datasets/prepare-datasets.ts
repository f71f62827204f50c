import { join } from "node:path";
import { isDeepStrictEqual } from "node:util";
import type { DatasetManifest, DatasetShard } from "../../api/schemas/datasets.ts";
import type { ObjectStore } from "../storage/object-store.ts";
import { brownCorpusSource } from "./brown-corpus-source.ts";
import { clearUnpublishedDataset, inScratchDir, publishDataset } from "./dataset-publish.ts";
import type { DatasetSource, RequestedOptions } from "./dataset-source.ts";
import { datasetObjectKey, manifestFiles, readManifest, writeManifestFile } from "./manifest.ts";
import { mnistSource } from "./mnist-source.ts";
import { locatePackage } from "./source-package.ts";

/**
 * Prepares dataset shards under `datasets/<name>/` of the platform's object store. Each dataset is
 * built in a local scratch directory (manifest last) and then published, its manifest last (see
 * dataset-publish.ts), so a killed run never leaves a half-written dataset where the platform serves
 * it; what it left is removed by the next run. A dataset whose manifest already matches the
 * installed package version and the options is skipped unless `force` is set. One prepare at a
 * time per store.
 */

export const DATASET_SOURCES: readonly DatasetSource[] = [mnistSource, brownCorpusSource];
export const DATASET_NAMES = DATASET_SOURCES.map((source) => source.name);

/**
 * Where the store of a data directory (the local default) keeps the datasets: for tools and tests
 * that read prepared shards from disk.
 */
export function datasetsDir(dataDir: string): string {
  return join(dataDir, "datasets");
}

export type PrepareEvent =
  | { readonly type: "start"; readonly dataset: string; readonly reason: string }
  | { readonly type: "shard"; readonly dataset: string; readonly shard: DatasetShard }
  | { readonly type: "skip"; readonly dataset: string; readonly reason: string }
  | { readonly type: "done"; readonly dataset: string; readonly manifest: DatasetManifest };

export interface PrepareOptions extends RequestedOptions {
  /** Where the datasets go: the store the platform serves them from. */
  readonly storage: ObjectStore;
  /** Names from DATASET_NAMES; all of them by default. */
  readonly datasets?: readonly string[];
  /** Prepare again even when the manifest is up to date. */
  readonly force?: boolean;
  readonly onProgress?: (event: PrepareEvent) => void;
}

export interface PrepareResult {
  readonly name: string;
  readonly status: "prepared" | "up-to-date";
  readonly manifest: DatasetManifest;
}

export async function prepareDatasets(options: PrepareOptions): Promise<PrepareResult[]> {
  const names = options.datasets ?? DATASET_NAMES;
  // Resolve (and so validate) every dataset's options before any work starts.
  const plans = names.map((name) => {
    const source = DATASET_SOURCES.find((candidate) => candidate.name === name);
    if (source === undefined) {
      throw new Error(`unknown dataset "${name}" (known: ${DATASET_NAMES.join(", ")})`);
    }
    return { source, wanted: source.resolveOptions(options) };
  });
  const results: PrepareResult[] = [];
  for (const { source, wanted } of plans) results.push(await prepareOne(source, wanted, options));
  return results;
}

async function prepareOne(
  source: DatasetSource,
  wanted: DatasetManifest["options"],
  options: PrepareOptions,
): Promise<PrepareResult> {
  const emit = options.onProgress ?? (() => undefined);
  const storage = options.storage;
  // A run killed while publishing leaves objects without a manifest: they are removed first.
  await clearUnpublishedDataset(storage, source.name);

  const pkg = await locatePackage(source.packageName);
  const current = await readManifest(storage, source.name);
  let reason = "not prepared yet";
  if (current.status === "ok") {
    const manifest = current.manifest;
    const version = "version" in manifest.createdFrom ? manifest.createdFrom.version : undefined;
    if (version === undefined) {
      reason = "it was imported from an uploaded file";
    } else if (version !== pkg.version) {
      reason = `${pkg.name} ${version} was replaced by ${pkg.version}`;
    } else if (!isDeepStrictEqual(manifest.options, wanted)) {
      reason = "the options changed";
    } else if (!(await filesIntact(storage, manifest))) {
      reason = "a file it lists is missing or has the wrong size";
    } else if (options.force === true) {
      reason = "forced";
    } else {
      emit({ type: "skip", dataset: source.name, reason: `up to date (${pkg.name} ${pkg.version})` });
      return { name: source.name, status: "up-to-date", manifest };
    }
  } else if (current.status === "invalid") {
    reason = current.reason;
  }

  emit({ type: "start", dataset: source.name, reason });
  const manifest = await inScratchDir(storage, source.name, async (dir) => {
    const built = await source.build({
      dir,
      source: pkg,
      options: wanted,
      onShard: (shard) => {
        emit({ type: "shard", dataset: source.name, shard });
      },
    });
    await writeManifestFile(dir, built);
    await publishDataset(storage, source.name, dir, built, { replace: true });
    return built;
  });
  emit({ type: "done", dataset: source.name, manifest });
  return { name: source.name, status: "prepared", manifest };
}

/** Whether every file the manifest lists exists with its listed size (a cheap check; --force rehashes). */
async function filesIntact(storage: ObjectStore, manifest: DatasetManifest): Promise<boolean> {
  for (const file of manifestFiles(manifest)) {
    const stored = await storage.head(datasetObjectKey(manifest.name, file.file));
    if (stored?.size !== file.bytes) return false;
  }
  return true;
}
