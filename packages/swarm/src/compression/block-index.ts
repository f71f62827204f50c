import type { CodecName } from "./compressor.ts";
import type { SwarmError } from "../errors.ts";
import { malformed } from "./wire.ts";

/**
 * Which positions of a block a sparse codec (topk, sparse) sends. Each block starts with
 *
 *   uint8   index kind: INDEX_LIST, INDEX_BITMAP or INDEX_RICE
 *   uint16  count of positions sent, little-endian
 *
 * and the index follows its codec's per-block parameters:
 * - INDEX_LIST: `count` uint16 offsets within the block, in increasing order;
 * - INDEX_BITMAP: ceil(length / 8) bytes, bit i of byte i >> 3 (LSB first) set for offset i, with
 *   exactly `count` bits set and the bits past the block's end zero;
 * - INDEX_RICE: uint8 Rice parameter r (0 to 15), uint16 n, then n bytes of bits (LSB first):
 *   per offset in increasing order, its gap g (the offset minus the previous one minus 1, the first
 *   offset itself) as g >> r one-bits, a zero bit, and the r low bits of g, least significant first;
 *   the bits after the last gap are zero and n is the fewest bytes that hold them. Positions spread
 *   over a block cost about log2(length / count) + 2 bits each: at 1.5 % of 4,096, 8 bits against
 *   the list's 16 (SparseLoCo sends 12-bit indices).
 * The encoder writes whichever is smallest (the list, then the bitmap, on a tie; the Rice parameter
 * that gives the fewest bytes, the smallest on a tie), and the decoder accepts any, so a block has
 * one valid reading and no reading outside it.
 */

export const INDEX_LIST = 0;
export const INDEX_BITMAP = 1;
export const INDEX_RICE = 2;
export type IndexKind = typeof INDEX_LIST | typeof INDEX_BITMAP | typeof INDEX_RICE;

/** Bytes of the index kind and the count. */
export const BLOCK_HEADER_BYTES = 3;

/** Largest block a sparse codec accepts: its offsets and counts fit a uint16. */
export const MAX_SPARSE_BLOCK_SIZE = 0xffff;

/** The Rice index's parameter byte and uint16 stream length. */
const RICE_HEADER_BYTES = 3;
const MAX_RICE_PARAMETER = 15;

/** Bytes of the list or the bitmap, whichever is smaller, without the block header. */
function listOrBitmapBytes(length: number, count: number): number {
  return Math.min(2 * count, Math.ceil(length / 8));
}

/**
 * The most bytes an index of `count` positions in a block of `length` takes, with the block header
 * (the smaller of the list and the bitmap: the Rice index is written only when it is smaller still).
 */
export function maxIndexBytes(length: number, count: number): number {
  return BLOCK_HEADER_BYTES + listOrBitmapBytes(length, count);
}

/** Bits of the Rice code with parameter `r` for gaps `gap` repeated `count` times. */
function evenRiceBits(gap: number, count: number, r: number): number {
  return count * ((gap >>> r) + 1 + r);
}

/**
 * The index bytes, with the block header, of `count` positions spread evenly over a block of
 * `length` (the Rice index's size depends on where the positions are; this is its typical size),
 * for codecs that estimate their size before they see the data.
 */
export function typicalIndexBytes(length: number, count: number): number {
  let best = listOrBitmapBytes(length, count);
  if (count === 0) return BLOCK_HEADER_BYTES + best;
  const gap = Math.floor((length - count) / count);
  for (let r = 0; r <= MAX_RICE_PARAMETER; r++) {
    best = Math.min(best, RICE_HEADER_BYTES + Math.ceil(evenRiceBits(gap, count, r) / 8));
  }
  return BLOCK_HEADER_BYTES + best;
}

/** The index the encoder writes for `offsets[0 … count)`: its kind, Rice parameter and bytes. */
interface IndexPlan {
  readonly kind: IndexKind;
  readonly rice: number;
  /** Bytes of the index, without the block header (for Rice, with its parameter and length). */
  readonly bytes: number;
}

function planIndex(length: number, offsets: ArrayLike<number>, count: number): IndexPlan {
  let plan: IndexPlan =
    2 * count <= Math.ceil(length / 8)
      ? { kind: INDEX_LIST, rice: 0, bytes: 2 * count }
      : { kind: INDEX_BITMAP, rice: 0, bytes: Math.ceil(length / 8) };
  for (let r = 0; r <= MAX_RICE_PARAMETER; r++) {
    // Each position takes at least 1 + r bits: from here on no larger r can be smaller.
    if (RICE_HEADER_BYTES + Math.ceil((count * (1 + r)) / 8) >= plan.bytes) break;
    let bits = 0;
    let previous = -1;
    for (let j = 0; j < count; j++) {
      const offset = offsets[j] ?? 0;
      bits += ((offset - previous - 1) >>> r) + 1 + r;
      previous = offset;
    }
    const bytes = RICE_HEADER_BYTES + Math.ceil(bits / 8);
    if (bytes < plan.bytes) plan = { kind: INDEX_RICE, rice: r, bytes };
  }
  return plan;
}

/**
 * Writes the block header at `at`, then the smallest index of `offsets[0 … count)` (increasing,
 * below `length`) after `gap` bytes of parameters the caller writes itself. `out` is zeroed and has
 * room for `maxIndexBytes`. Returns the offset just past the index.
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
  const plan = planIndex(length, offsets, count);
  view.setUint8(at, plan.kind);
  view.setUint16(at + 1, count, true);
  const start = at + BLOCK_HEADER_BYTES + gap;
  if (plan.kind === INDEX_LIST) {
    for (let j = 0; j < count; j++) view.setUint16(start + 2 * j, offsets[j] ?? 0, true);
  } else if (plan.kind === INDEX_BITMAP) {
    for (let j = 0; j < count; j++) {
      const offset = offsets[j] ?? 0;
      out[start + (offset >> 3)] = (out[start + (offset >> 3)] ?? 0) | (1 << (offset & 7));
    }
  } else {
    const r = plan.rice;
    view.setUint8(start, r);
    view.setUint16(start + 1, plan.bytes - RICE_HEADER_BYTES, true);
    const stream = start + RICE_HEADER_BYTES;
    let bit = 0;
    let previous = -1;
    for (let j = 0; j < count; j++) {
      const offset = offsets[j] ?? 0;
      const value = offset - previous - 1;
      previous = offset;
      // g >> r one-bits, then the zero bit (already zero), then the r low bits.
      for (let q = value >>> r; q > 0; q--, bit++) setBit(out, stream, bit);
      bit++;
      for (let b = 0; b < r; b++, bit++) {
        if (((value >>> b) & 1) !== 0) setBit(out, stream, bit);
      }
    }
  }
  return start + plan.bytes;
}

/** The refusal of a sparse codec's body that ends inside block `block`. */
export function truncated(name: CodecName, body: Uint8Array, block: number): SwarmError {
  return malformed(`${name} body is truncated: ${body.length} bytes end inside block ${block}`);
}

/** Sets bit `bit` (LSB first) of the bytes from `start`. */
function setBit(out: Uint8Array, start: number, bit: number): void {
  const at = start + (bit >> 3);
  out[at] = (out[at] ?? 0) | (1 << (bit & 7));
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
    throw truncated(name, body, block);
  }
  const kind = view.getUint8(at);
  if (kind !== INDEX_LIST && kind !== INDEX_BITMAP && kind !== INDEX_RICE) {
    throw malformed(`${name} block ${block} has unknown index kind ${kind}`);
  }
  const count = view.getUint16(at + 1, true);
  if (count < leastCount || count > length) {
    throw malformed(`${name} block ${block} sends ${count} of its ${length} elements`);
  }
  return { kind, count };
}

/**
 * Reads the index at `at` into `offsets[0 … count)`, increasing, and returns the offset just past
 * it; refuses an index past the end of `body`, offsets that are out of order, repeated or past the
 * block's end, a bitmap with another number of bits set or with bits set past the block's end, and a
 * Rice index with a parameter over 15, a stream that ends early, or bits or bytes after its last gap.
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
): number {
  const { kind, count } = header;
  if (kind === INDEX_LIST) {
    if (at + 2 * count > body.length) throw truncated(name, body, block);
    let previous = -1;
    for (let j = 0; j < count; j++) {
      const offset = view.getUint16(at + 2 * j, true);
      if (offset <= previous || offset >= length) {
        throw malformed(`${name} block ${block} lists offset ${offset} after ${previous} (length ${length})`);
      }
      offsets[j] = offset;
      previous = offset;
    }
    return at + 2 * count;
  }
  if (kind === INDEX_RICE) return readRiceIndex(name, body, view, at, block, length, count, offsets);
  const bytes = Math.ceil(length / 8);
  if (at + bytes > body.length) throw truncated(name, body, block);
  let found = 0;
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
  return at + bytes;
}

function readRiceIndex(
  name: CodecName,
  body: Uint8Array,
  view: DataView,
  at: number,
  block: number,
  length: number,
  count: number,
  offsets: Int32Array,
): number {
  if (at + RICE_HEADER_BYTES > body.length) {
    throw truncated(name, body, block);
  }
  const r = view.getUint8(at);
  if (r > MAX_RICE_PARAMETER) {
    throw malformed(`${name} block ${block} has Rice parameter ${r}, more than ${MAX_RICE_PARAMETER}`);
  }
  const bytes = view.getUint16(at + 1, true);
  const stream = at + RICE_HEADER_BYTES;
  if (stream + bytes > body.length) {
    throw truncated(name, body, block);
  }
  const bits = 8 * bytes;
  const bitAt = (bit: number): number => ((body[stream + (bit >> 3)] ?? 0) >> (bit & 7)) & 1;
  const ended = (): SwarmError =>
    malformed(`${name} block ${block} Rice index ends before its ${count} offsets`);
  let bit = 0;
  let previous = -1;
  for (let j = 0; j < count; j++) {
    let quotient = 0;
    for (;;) {
      if (bit >= bits) throw ended();
      if (bitAt(bit++) === 0) break;
      quotient++;
      // Any larger gap lands past the block's end: stop reading it.
      if (quotient << r >= length) {
        throw malformed(`${name} block ${block} Rice index has an offset past its end (length ${length})`);
      }
    }
    if (bit + r > bits) throw ended();
    let value = quotient << r;
    for (let b = 0; b < r; b++) value |= bitAt(bit++) << b;
    const offset = previous + 1 + value;
    if (offset >= length) {
      throw malformed(
        `${name} block ${block} Rice index has offset ${offset} past its end (length ${length})`,
      );
    }
    offsets[j] = offset;
    previous = offset;
  }
  if (Math.ceil(bit / 8) !== bytes) {
    throw malformed(
      `${name} block ${block} Rice index has ${bytes - Math.ceil(bit / 8)} bytes after its offsets`,
    );
  }
  for (; bit < bits; bit++) {
    if (bitAt(bit) !== 0) throw malformed(`${name} block ${block} Rice index sets bits after its offsets`);
  }
  return stream + bytes;
}
