import { DatasetError, DatasetErrorCode } from "./dataset-error.ts";

/** Bytes per float32 value. */
const FLOAT_BYTES = 4;

/** One row of a `tabular-f32` dataset: its features (its own copy) and its label. */
export interface TabularRecord {
  readonly features: Float32Array;
  /** A class id 0 … classes − 1, or the value to predict. */
  readonly label: number;
}

/** What a shard's records must look like. */
export interface TabularLayout {
  /** Features per record; a record is `features + 1` float32 values. */
  readonly features: number;
  /** The classes of a `class` label (ids must be whole numbers below it); undefined for a `value`. */
  readonly classes: number | undefined;
  /** The record count the manifest gives the shard. */
  readonly expectedRecords?: number;
}

/**
 * Splits a `tabular-f32` shard into records: `features` float32 little-endian values, then the
 * label. Each record gets its own copy of its features, so a record waiting in the shuffle buffer
 * does not keep its shard in memory. Refuses a shard whose length is not a whole number of
 * records, whose record count differs from the manifest, with a value that is not finite (one NaN
 * would spoil the swarm's averaged gradient), or with a class label that is not a valid class id.
 */
export function decodeTabularShard(bytes: Uint8Array, file: string, layout: TabularLayout): TabularRecord[] {
  const { features, classes } = layout;
  const recordBytes = (features + 1) * FLOAT_BYTES;
  if (bytes.byteLength % recordBytes !== 0) {
    throw malformed(
      file,
      `${bytes.byteLength} bytes is not a whole number of ${recordBytes}-byte records ` +
        `(${features} features and a label, float32 each)`,
    );
  }
  const count = bytes.byteLength / recordBytes;
  if (layout.expectedRecords !== undefined && count !== layout.expectedRecords) {
    throw malformed(file, `it holds ${count} records, the manifest says ${layout.expectedRecords}`);
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const records = new Array<TabularRecord>(count);
  for (let k = 0; k < count; k++) {
    const start = k * recordBytes;
    const values = new Float32Array(features);
    for (let i = 0; i < features; i++) {
      const value = view.getFloat32(start + i * FLOAT_BYTES, true);
      if (!Number.isFinite(value))
        throw malformed(file, `record ${k} has feature ${i} = ${value}; features must be finite`);
      values[i] = value;
    }
    const label = view.getFloat32(start + features * FLOAT_BYTES, true);
    if (
      classes === undefined
        ? !Number.isFinite(label)
        : !Number.isInteger(label) || label < 0 || label >= classes
    ) {
      throw malformed(
        file,
        classes === undefined
          ? `record ${k} has label ${label}; a value label must be finite`
          : `record ${k} has label ${label}; class labels must be whole numbers 0…${classes - 1}`,
      );
    }
    records[k] = { features: values, label };
  }
  return records;
}

function malformed(file: string, what: string): DatasetError {
  return new DatasetError(DatasetErrorCode.SHARD_MALFORMED, `tabular shard ${file} is malformed: ${what}`);
}
