import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import {
  datasetManifestSchema,
  type DatasetManifest,
  type DatasetShard,
  type DatasetSplitSummary,
} from "../../api/schemas/datasets.ts";
import { readObjectIfPresent, type ObjectStore } from "../storage/object-store.ts";

export const MANIFEST_FILE = "manifest.json";

/** Records, bytes and shard count per split. */
export function summarizeSplits(shards: readonly DatasetShard[]): DatasetManifest["splits"] {
  const summary = (split: DatasetShard["split"]): DatasetSplitSummary => {
    const own = shards.filter((shard) => shard.split === split);
    return {
      records: own.reduce((sum, shard) => sum + shard.records, 0),
      bytes: own.reduce((sum, shard) => sum + shard.bytes, 0),
      shards: own.length,
    };
  };
  return { train: summary("train"), test: summary("test") };
}

export type ManifestRead =
  | { readonly status: "ok"; readonly manifest: DatasetManifest }
  | { readonly status: "missing" }
  | { readonly status: "invalid"; readonly reason: string };

/** The object key of a file of dataset `name` (its manifest, a shard, its vocabulary). */
export function datasetObjectKey(name: string, file: string): string {
  return `datasets/${name}/${file}`;
}

/** Reads and validates the manifest of dataset `name` in the store. */
export async function readManifest(storage: ObjectStore, name: string): Promise<ManifestRead> {
  const bytes = await readObjectIfPresent(storage, datasetObjectKey(name, MANIFEST_FILE));
  if (bytes === null) return { status: "missing" };
  return parseManifest(new TextDecoder().decode(bytes));
}

function parseManifest(text: string): ManifestRead {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return { status: "invalid", reason: `${MANIFEST_FILE} is not valid JSON` };
  }
  const parsed = datasetManifestSchema.safeParse(value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const where = issue ? `${issue.path.map(String).join(".") || "manifest"}: ${issue.message}` : "";
    return { status: "invalid", reason: `${MANIFEST_FILE} does not match format version 1 (${where})` };
  }
  return { status: "ok", manifest: parsed.data };
}

/** Writes the manifest (pretty JSON, newline-terminated, flushed to disk). */
export async function writeManifestFile(dir: string, manifest: DatasetManifest): Promise<void> {
  await writeFile(join(dir, MANIFEST_FILE), `${JSON.stringify(manifest, null, 2)}\n`, {
    flag: "wx",
    flush: true,
  });
}

/** A file a manifest names, with the content type it is served with. */
export interface ListedFile {
  readonly file: string;
  readonly bytes: number;
  readonly sha256: string;
  readonly contentType: string;
}

/** Every file a manifest names: its shards, then its vocabulary if it has one. */
export function manifestFiles(manifest: DatasetManifest): ListedFile[] {
  const files: ListedFile[] = manifest.shards.map((shard) => ({
    file: shard.file,
    bytes: shard.bytes,
    sha256: shard.sha256,
    contentType: "application/octet-stream",
  }));
  if (manifest.format === "tokens-u16le") {
    const { file, bytes, sha256 } = manifest.vocabulary;
    files.push({ file, bytes, sha256, contentType: "text/plain; charset=utf-8" });
  }
  return files;
}
