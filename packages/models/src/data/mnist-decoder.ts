import { DatasetError, DatasetErrorCode } from "./dataset-error.ts";

/** Bytes per `mnist-u8` record: 784 pixels, then the label. */
export const MNIST_RECORD_BYTES = 785;
/** Pixels per digit image (28 × 28). */
export const MNIST_PIXELS = 784;
const CLASSES = 10;

/** One digit: its 784 uint8 pixels (row-major, its own copy) and its label 0…9. */
export interface MnistRecord {
  readonly pixels: Uint8Array;
  readonly label: number;
}

/**
 * Splits an `mnist-u8` shard into records. Each record gets its own copy of the pixels, so a record
 * waiting in the shuffle buffer does not keep its whole shard in memory. Refuses a shard whose
 * length is not a whole number of records, whose record count differs from the manifest, or with a
 * label ≥ 10.
 */
export function decodeMnistShard(bytes: Uint8Array, file: string, expectedRecords?: number): MnistRecord[] {
  if (bytes.byteLength % MNIST_RECORD_BYTES !== 0) {
    throw malformed(
      file,
      `${bytes.byteLength} bytes is not a whole number of ${MNIST_RECORD_BYTES}-byte records`,
    );
  }
  const count = bytes.byteLength / MNIST_RECORD_BYTES;
  if (expectedRecords !== undefined && count !== expectedRecords) {
    throw malformed(file, `it holds ${count} records, the manifest says ${expectedRecords}`);
  }
  const records: MnistRecord[] = new Array<MnistRecord>(count);
  for (let k = 0; k < count; k++) {
    const start = k * MNIST_RECORD_BYTES;
    const label = bytes[start + MNIST_PIXELS] ?? 0;
    if (label >= CLASSES) throw malformed(file, `record ${k} has label ${label}, expected 0…${CLASSES - 1}`);
    records[k] = { pixels: bytes.slice(start, start + MNIST_PIXELS), label };
  }
  return records;
}

function malformed(file: string, what: string): DatasetError {
  return new DatasetError(DatasetErrorCode.SHARD_MALFORMED, `mnist shard ${file} is malformed: ${what}`);
}
