import type { CodecName } from "./compressor.ts";
import { malformed } from "./wire.ts";

/**
 * Which positions of a block a sparse codec (topk, sparse) sends. Each block starts with
 *
 *   uint8   index kind: INDEX_LIST or INDEX_BITMAP
 *   uint16  count of positions sent, little-endian
 *
 * and the index follows its codec's per-block parameters: for INDEX_LIST, `count` uint16 offsets
 * within the block in increasing order; for INDEX_BITMAP, ceil(length / 8) bytes, bit i of byte
 * i >> 3 (LSB first) set for offset i, with exactly `count` bits set and the bits past the block's
 * end zero. The encoder writes whichever is smaller (the list on a tie), and the decoder accepts
 * either, so a block has one valid reading and no reading outside it.
 */

export const INDEX_LIST = 0;
export const INDEX_BITMAP = 1;
export type IndexKind = typeof INDEX_LIST | typeof INDEX_BITMAP;

/** Bytes of the index kind and the count. */
export const BLOCK_HEADER_BYTES = 3;

/** Largest block a sparse codec accepts: its offsets and counts fit a uint16. */
export const MAX_SPARSE_BLOCK_SIZE = 0xffff;

/** The smaller index for `count` positions in a block of `length` elements. */
export function indexKindFor(length: number, count: number): IndexKind {
  return 2 * count <= Math.ceil(length / 8) ? INDEX_LIST : INDEX_BITMAP;
}

/** Bytes of an index of the given kind. */
export function indexBytes(kind: IndexKind, length: number, count: number): number {
  return kind === INDEX_LIST ? 2 * count : Math.ceil(length / 8);
}

/** Bytes of the smaller index, with the block header. */
export function smallestIndexBytes(length: number, count: number): number {
  return BLOCK_HEADER_BYTES + indexBytes(indexKindFor(length, count), length, count);
}

/**
 * Writes the block header at `at`, then the smaller index of `offsets[0 … count)` (increasing,
 * below `length`) after `gap` bytes of parameters the caller writes itself. `out` is zeroed.
 * Returns the offset just past the index.
 */
export function writeBlockIndex(
  out: Uint8Array,
  view: DataView,
  at: number,
  gap: number,
  length: number,
  offsets: ArrayLike<number>,
  count: number,
): number {
  const kind = indexKindFor(length, count);
  view.setUint8(at, kind);
  view.setUint16(at + 1, count, true);
  const start = at + BLOCK_HEADER_BYTES + gap;
  if (kind === INDEX_LIST) {
    for (let j = 0; j < count; j++) view.setUint16(start + 2 * j, offsets[j] ?? 0, true);
  } else {
    for (let j = 0; j < count; j++) {
      const offset = offsets[j] ?? 0;
      out[start + (offset >> 3)] = (out[start + (offset >> 3)] ?? 0) | (1 << (offset & 7));
    }
  }
  return start + indexBytes(kind, length, count);
}

/** A block's header as read, checked against the block's length and the codec's least count. */
export interface BlockHeader {
  kind: IndexKind;
  count: number;
}

/**
 * Reads the block header of block `block` at `at`; refuses a header past the end of `body`, an
 * unknown kind, or a count outside [leastCount, length].
 */
export function readBlockHeader(
  name: CodecName,
  body: Uint8Array,
  view: DataView,
  at: number,
  block: number,
  length: number,
  leastCount: number,
): BlockHeader {
  if (at + BLOCK_HEADER_BYTES > body.length) {
    throw malformed(`${name} body is truncated: ${body.length} bytes end inside block ${block}`);
  }
  const kind = view.getUint8(at);
  if (kind !== INDEX_LIST && kind !== INDEX_BITMAP) {
    throw malformed(`${name} block ${block} has unknown index kind ${kind}`);
  }
  const count = view.getUint16(at + 1, true);
  if (count < leastCount || count > length) {
    throw malformed(`${name} block ${block} sends ${count} of its ${length} elements`);
  }
  return { kind, count };
}

/**
 * Reads the index at `at` (already known to lie within the body) into `offsets[0 … count)`,
 * increasing; refuses offsets that are out of order, repeated or past the block's end, and a bitmap
 * with another number of bits set or with bits set past the block's end.
 */
export function readBlockIndex(
  name: CodecName,
  body: Uint8Array,
  view: DataView,
  at: number,
  block: number,
  length: number,
  header: BlockHeader,
  offsets: Int32Array,
): void {
  const { kind, count } = header;
  if (kind === INDEX_LIST) {
    let previous = -1;
    for (let j = 0; j < count; j++) {
      const offset = view.getUint16(at + 2 * j, true);
      if (offset <= previous || offset >= length) {
        throw malformed(`${name} block ${block} lists offset ${offset} after ${previous} (length ${length})`);
      }
      offsets[j] = offset;
      previous = offset;
    }
    return;
  }
  let found = 0;
  const bytes = Math.ceil(length / 8);
  for (let b = 0; b < bytes; b++) {
    let byte = body[at + b] ?? 0;
    while (byte !== 0) {
      const bit = 31 - Math.clz32(byte & -byte);
      const offset = 8 * b + bit;
      if (offset >= length) throw malformed(`${name} block ${block} bitmap sets bit ${offset} past its end`);
      if (found === count) throw malformed(`${name} block ${block} bitmap sets more than ${count} bits`);
      offsets[found++] = offset;
      byte &= byte - 1;
    }
  }
  if (found !== count) throw malformed(`${name} block ${block} bitmap sets ${found} bits, not ${count}`);
}
