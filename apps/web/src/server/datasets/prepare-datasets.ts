import { isDeepStrictEqual } from "node:util";
import { mkdir, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import type { DatasetManifest, DatasetShard } from "../../api/schemas/datasets.ts";
import { brownCorpusSource } from "./brown-corpus-source.ts";
import { datasetDirs, installDataset, recoverDatasetDirs } from "./dataset-dir.ts";
import type { DatasetSource, RequestedOptions } from "./dataset-source.ts";
import { manifestFiles, readManifestFile, writeManifestFile } from "./manifest.ts";
import { mnistSource } from "./mnist-source.ts";
import { locatePackage } from "./source-package.ts";

/**
 * Prepares dataset shards under `<data dir>/datasets/<name>/`. Each dataset is built in
 * `<name>.tmp/` (manifest last) and then renamed into place, so a killed run never leaves a
 * half-written dataset where the platform serves it; a leftover `.tmp` is removed by the next run.
 * A dataset whose manifest already matches the installed package version and the options is
 * skipped unless `force` is set. One prepare at a time per data directory.
 */

export const DATASET_SOURCES: readonly DatasetSource[] = [mnistSource, brownCorpusSource];
export const DATASET_NAMES = DATASET_SOURCES.map((source) => source.name);

export function datasetsDir(dataDir: string): string {
  return join(dataDir, "datasets");
}

export type PrepareEvent =
  | { readonly type: "start"; readonly dataset: string; readonly reason: string }
  | { readonly type: "shard"; readonly dataset: string; readonly shard: DatasetShard }
  | { readonly type: "skip"; readonly dataset: string; readonly reason: string }
  | { readonly type: "done"; readonly dataset: string; readonly manifest: DatasetManifest };

export interface PrepareOptions extends RequestedOptions {
  readonly dataDir: string;
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
  const root = datasetsDir(options.dataDir);
  await mkdir(root, { recursive: true });
  const results: PrepareResult[] = [];
  for (const { source, wanted } of plans) results.push(await prepareOne(root, source, wanted, options));
  return results;
}

async function prepareOne(
  root: string,
  source: DatasetSource,
  wanted: DatasetManifest["options"],
  options: PrepareOptions,
): Promise<PrepareResult> {
  const emit = options.onProgress ?? (() => undefined);
  const dirs = datasetDirs(root, source.name);
  const { final, temp } = dirs;
  // A run killed between the two renames of the swap leaves only `<name>.old`: it is put back first.
  await recoverDatasetDirs(dirs);

  const pkg = await locatePackage(source.packageName);
  const current = await readManifestFile(final);
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
    } else if (!(await filesIntact(final, manifest))) {
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
  await mkdir(temp);
  let manifest: DatasetManifest;
  try {
    manifest = await source.build({
      dir: temp,
      source: pkg,
      options: wanted,
      onShard: (shard) => {
        emit({ type: "shard", dataset: source.name, shard });
      },
    });
    await writeManifestFile(temp, manifest);
  } catch (error) {
    await rm(temp, { recursive: true, force: true });
    throw error;
  }
  await installDataset(dirs, source.name, { replace: true });
  emit({ type: "done", dataset: source.name, manifest });
  return { name: source.name, status: "prepared", manifest };
}

/** Whether every file the manifest lists exists with its listed size (a cheap check; --force rehashes). */
async function filesIntact(dir: string, manifest: DatasetManifest): Promise<boolean> {
  for (const file of manifestFiles(manifest)) {
    try {
      const info = await stat(join(dir, file.file));
      if (!info.isFile() || info.size !== file.bytes) return false;
    } catch {
      return false;
    }
  }
  return true;
}
