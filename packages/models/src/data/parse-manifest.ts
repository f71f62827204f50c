import {
  DATASET_FORMAT_VERSION,
  type DatasetManifest,
  datasetManifestSchema,
  datasetSplitSchema,
} from "@barnraise/protocol";
import { DatasetError, DatasetErrorCode } from "./dataset-error.ts";

/**
 * Validates a manifest received from the platform: the format version first (a newer platform
 * gets a clear "update the peer" message, not a schema error), then the shared schema, then the
 * promises the schema cannot express (split totals agree with the shards, the name is the one asked).
 */
export function parseManifest(json: unknown, expectedName: string): DatasetManifest {
  const version = isRecord(json) ? json["formatVersion"] : undefined;
  if (version !== DATASET_FORMAT_VERSION) {
    throw new DatasetError(
      DatasetErrorCode.FORMAT_UNSUPPORTED,
      `dataset ${expectedName}: manifest format version ${String(version)} is not supported (this peer ` +
        `reads version ${DATASET_FORMAT_VERSION}); update the peer or prepare the dataset with a matching platform`,
    );
  }
  const parsed = datasetManifestSchema.safeParse(json);
  if (!parsed.success) {
    const issues = parsed.error.issues
      .slice(0, 5)
      .map((issue) => `${issue.path.map(String).join(".") || "manifest"}: ${issue.message}`);
    throw new DatasetError(
      DatasetErrorCode.MANIFEST_INVALID,
      `dataset ${expectedName}: the manifest is invalid: ${issues.join("; ")}`,
    );
  }
  const manifest = parsed.data;
  if (manifest.name !== expectedName) {
    throw invalid(expectedName, `it describes dataset "${manifest.name}"`);
  }
  for (const split of datasetSplitSchema.options) {
    const shards = manifest.shards.filter((shard) => shard.split === split);
    const summary = manifest.splits[split];
    const records = shards.reduce((sum, shard) => sum + shard.records, 0);
    const bytes = shards.reduce((sum, shard) => sum + shard.bytes, 0);
    if (shards.length !== summary.shards || records !== summary.records || bytes !== summary.bytes) {
      throw invalid(
        expectedName,
        `split ${split} lists ${shards.length} shards, ${records} records, ${bytes} bytes ` +
          `but its summary says ${summary.shards}, ${summary.records}, ${summary.bytes}`,
      );
    }
  }
  const files = new Set(manifest.shards.map((shard) => shard.file));
  if (files.size !== manifest.shards.length) throw invalid(expectedName, "a shard file is listed twice");
  for (const shard of manifest.shards) {
    if (!shard.file.startsWith(`${shard.split}-`)) {
      throw invalid(expectedName, `shard ${shard.file} is listed under split ${shard.split}`);
    }
  }
  if (manifest.format === "tabular-f32") {
    const { features, label } = manifest.record;
    if (manifest.record.bytes !== 4 * (features.count + 1)) {
      throw invalid(
        expectedName,
        `a record of ${features.count} float32 features and a label is ${4 * (features.count + 1)} bytes, ` +
          `not the ${manifest.record.bytes} it says`,
      );
    }
    if (label.kind === "class" && (label.classes === null || label.classes.length === 0)) {
      throw invalid(expectedName, `the class label ${label.name} lists no classes`);
    }
  }
  return manifest;
}

function invalid(name: string, what: string): DatasetError {
  return new DatasetError(
    DatasetErrorCode.MANIFEST_INVALID,
    `dataset ${name}: the manifest is inconsistent: ${what}`,
  );
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
