import { DatasetError, DatasetErrorCode } from "./dataset-error.ts";

/** One image of an `image-u8` dataset: its pixels (its own copy) and its class id. */
export interface ImageRecord {
  /** height × width × channels bytes, 0 … 255. */
  readonly pixels: Uint8Array;
  readonly label: number;
}

/** What a shard's records must look like. */
export interface ImageLayout {
  /** Bytes of pixels per record (height × width × channels); a record is 2 bytes more. */
  readonly pixels: number;
  /** Class ids must be below this. */
  readonly classes: number;
  /** The record count the manifest gives the shard. */
  readonly expectedRecords?: number;
}

/**
 * Splits an `image-u8` shard into records: the pixels, then a uint16 little-endian class id. Each
 * record gets its own copy of its pixels, so a record in the shuffle buffer does not keep its shard
 * in memory. Refuses a shard that is not a whole number of records, whose count differs from the
 * manifest, or with a class id that is not one of the dataset's classes.
 */
export function decodeImageShard(bytes: Uint8Array, file: string, layout: ImageLayout): ImageRecord[] {
  const { pixels, classes } = layout;
  const recordBytes = pixels + 2;
  if (bytes.byteLength % recordBytes !== 0) {
    throw malformed(file, `${bytes.byteLength} bytes is not a whole number of ${recordBytes}-byte records`);
  }
  const count = bytes.byteLength / recordBytes;
  if (layout.expectedRecords !== undefined && count !== layout.expectedRecords) {
    throw malformed(file, `it holds ${count} records, the manifest says ${layout.expectedRecords}`);
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const records = new Array<ImageRecord>(count);
  for (let k = 0; k < count; k++) {
    const start = k * recordBytes;
    const label = view.getUint16(start + pixels, true);
    if (label >= classes) {
      throw malformed(file, `record ${k} has class ${label}; the dataset has ${classes} classes`);
    }
    records[k] = { pixels: bytes.slice(start, start + pixels), label };
  }
  return records;
}

function malformed(file: string, what: string): DatasetError {
  return new DatasetError(DatasetErrorCode.SHARD_MALFORMED, `image shard ${file} is malformed: ${what}`);
}
