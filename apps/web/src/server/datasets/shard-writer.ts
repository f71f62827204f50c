import { createHash, type Hash } from "node:crypto";
import { open, writeFile, type FileHandle } from "node:fs/promises";
import { join } from "node:path";
import type { DatasetShard, DatasetSplit } from "../../api/schemas/datasets.ts";

/** Shard files are named `<split>-<5-digit index>.bin`, numbered from 0 within each split. */
export function shardFileName(split: DatasetSplit, index: number): string {
  return `${split}-${String(index).padStart(5, "0")}.bin`;
}

const FLUSH_BYTES = 1 << 20;

interface OpenShard {
  readonly file: string;
  readonly handle: FileHandle;
  readonly hash: Hash;
  records: number;
  bytes: number;
  pending: Uint8Array[];
  pendingBytes: number;
}

/**
 * Writes one split's records into numbered shard files of `recordsPerShard` records each (the last
 * one may be shorter), hashing them on the way. Each finished shard is flushed to disk (fsync) before
 * it is reported, so a manifest written after `finish()` only names complete files.
 */
export class ShardWriter {
  private readonly entries: DatasetShard[] = [];
  private current: OpenShard | undefined;
  private finished = false;
  private readonly dir: string;
  private readonly split: DatasetSplit;
  private readonly recordsPerShard: number;
  private readonly onShard: (shard: DatasetShard) => void;

  constructor(options: {
    dir: string;
    split: DatasetSplit;
    recordsPerShard: number;
    onShard?: (shard: DatasetShard) => void;
  }) {
    if (!Number.isSafeInteger(options.recordsPerShard) || options.recordsPerShard < 1) {
      throw new RangeError(`recordsPerShard must be a positive integer, got ${options.recordsPerShard}`);
    }
    this.dir = options.dir;
    this.split = options.split;
    this.recordsPerShard = options.recordsPerShard;
    this.onShard = options.onShard ?? (() => undefined);
  }

  async write(record: Uint8Array): Promise<void> {
    if (this.finished) throw new Error("the shard writer is finished");
    const shard = this.current ?? (await this.openNext());
    shard.pending.push(record);
    shard.pendingBytes += record.byteLength;
    shard.hash.update(record);
    shard.records += 1;
    shard.bytes += record.byteLength;
    if (shard.pendingBytes >= FLUSH_BYTES) await flush(shard);
    if (shard.records === this.recordsPerShard) await this.closeCurrent();
  }

  /**
   * Writes whole fixed-size records packed one after another in `records` (its length a multiple of
   * `recordBytes`), splitting them between shards where a shard fills up: the same files as writing
   * them one by one, with one call per batch instead of per record. The writer keeps `records` (not
   * a copy) until it flushes them, so the caller must not change it afterwards.
   */
  async writeRecords(records: Uint8Array, recordBytes: number): Promise<void> {
    if (this.finished) throw new Error("the shard writer is finished");
    if (!Number.isSafeInteger(recordBytes) || recordBytes < 1 || records.byteLength % recordBytes !== 0) {
      throw new RangeError(`${records.byteLength} bytes are not whole records of ${recordBytes} bytes`);
    }
    let offset = 0;
    while (offset < records.byteLength) {
      const shard = this.current ?? (await this.openNext());
      const count = Math.min(
        this.recordsPerShard - shard.records,
        (records.byteLength - offset) / recordBytes,
      );
      const part = records.subarray(offset, offset + count * recordBytes);
      offset += part.byteLength;
      shard.pending.push(part);
      shard.pendingBytes += part.byteLength;
      shard.hash.update(part);
      shard.records += count;
      shard.bytes += part.byteLength;
      if (shard.pendingBytes >= FLUSH_BYTES) await flush(shard);
      if (shard.records === this.recordsPerShard) await this.closeCurrent();
    }
  }

  /** Closes the last shard and returns every shard written, in order. */
  async finish(): Promise<DatasetShard[]> {
    if (!this.finished) {
      await this.closeCurrent();
      this.finished = true;
    }
    return [...this.entries];
  }

  /** Closes an open file after a failure elsewhere; the caller discards the directory. */
  async abort(): Promise<void> {
    this.finished = true;
    const shard = this.current;
    this.current = undefined;
    await shard?.handle.close();
  }

  private async openNext(): Promise<OpenShard> {
    const file = shardFileName(this.split, this.entries.length);
    const handle = await open(join(this.dir, file), "wx");
    this.current = {
      file,
      handle,
      hash: createHash("sha256"),
      records: 0,
      bytes: 0,
      pending: [],
      pendingBytes: 0,
    };
    return this.current;
  }

  private async closeCurrent(): Promise<void> {
    const shard = this.current;
    if (shard === undefined) return;
    this.current = undefined;
    try {
      await flush(shard);
      await shard.handle.sync();
    } finally {
      await shard.handle.close();
    }
    const entry: DatasetShard = {
      file: shard.file,
      split: this.split,
      records: shard.records,
      bytes: shard.bytes,
      sha256: shard.hash.digest("hex"),
    };
    this.entries.push(entry);
    this.onShard(entry);
  }
}

async function flush(shard: OpenShard): Promise<void> {
  if (shard.pending.length === 0) return;
  const chunks = shard.pending;
  shard.pending = [];
  shard.pendingBytes = 0;
  // writeFile on a handle writes at the current position and loops until every byte is written.
  await shard.handle.writeFile(Buffer.concat(chunks));
}

/** Writes a small file with fsync and returns its size and SHA-256 (for side files like vocab.txt). */
export async function writeSyncedFile(
  path: string,
  bytes: Uint8Array,
): Promise<{ bytes: number; sha256: string }> {
  await writeFile(path, bytes, { flag: "wx", flush: true });
  return { bytes: bytes.byteLength, sha256: createHash("sha256").update(bytes).digest("hex") };
}
