import { SwarmError, SwarmErrorCode } from "../errors.ts";
import {
  BLOCK_HEADER_BYTES,
  MAX_SPARSE_BLOCK_SIZE,
  maxIndexBytes,
  readBlockHeader,
  readBlockIndex,
  truncated,
  typicalIndexBytes,
  writeBlockIndex,
} from "./block-index.ts";
import {
  allocateEncoded,
  expectBodySize,
  HEADER_BYTES,
  malformed,
  nonFiniteInput,
  ratioOf,
  viewOf,
  type Codec,
} from "./wire.ts";

/** The experiment config's default `compression.topkDensity`: 1.5 % of each block is sent. */
export const DEFAULT_TOPK_DENSITY = 0.015;

/** Elements per block; each block keeps its own top k and its own two levels. The last may be shorter. */
export const TOPK_BLOCK_SIZE = 4096;

/** Parameter before the blocks: uint32 block size (so a decoder never assumes it). */
const BLOCK_SIZE_BYTES = 4;
/** Per block, after the index kind and count: the low and the high level, float32 each. */
const LEVELS_BYTES = 8;

/** Elements kept of a block of `length`: ceil(density · length), at least one. */
export function keptCount(length: number, density: number): number {
  return Math.max(1, Math.ceil(density * length));
}

/** Index bytes (with the block header) of `kept` positions in a block of `length`: the most, or the typical. */
type IndexSize = (length: number, kept: number) => number;

/** Encoded bytes of one block of `length` elements keeping `kept` of them. */
function blockBytes(length: number, kept: number, index: IndexSize): number {
  return index(length, kept) + LEVELS_BYTES + Math.ceil(kept / 4);
}

/** Encoded body bytes (after the common header) of a vector of `length` elements. */
function bodyBytes(length: number, density: number, index: IndexSize): number {
  const fullBlocks = Math.floor(length / TOPK_BLOCK_SIZE);
  const rest = length - fullBlocks * TOPK_BLOCK_SIZE;
  const full = fullBlocks * blockBytes(TOPK_BLOCK_SIZE, keptCount(TOPK_BLOCK_SIZE, density), index);
  return BLOCK_SIZE_BYTES + full + (rest > 0 ? blockBytes(rest, keptCount(rest, density), index) : 0);
}

/**
 * Work buffers for one block, reused across blocks: the kept set as a min-heap ordered by
 * (magnitude, then higher index first), so its root is the weakest kept element.
 */
interface Selection {
  magnitudes: Float64Array;
  offsets: Int32Array;
  sorted: Float64Array;
}

/** Sifts the heap entry at `at` down, the weakest entry (smaller magnitude, then higher offset) on top. */
function siftDown(heap: Selection, size: number, at: number): void {
  const { magnitudes, offsets } = heap;
  const magnitude = magnitudes[at] ?? 0;
  const offset = offsets[at] ?? 0;
  for (;;) {
    let child = 2 * at + 1;
    if (child >= size) break;
    const right = child + 1;
    if (right < size) {
      const l = magnitudes[child] ?? 0;
      const r = magnitudes[right] ?? 0;
      if (r < l || (r === l && (offsets[right] ?? 0) > (offsets[child] ?? 0))) child = right;
    }
    const c = magnitudes[child] ?? 0;
    if (c > magnitude || (c === magnitude && (offsets[child] ?? 0) < offset)) break;
    magnitudes[at] = c;
    offsets[at] = offsets[child] ?? 0;
    at = child;
  }
  magnitudes[at] = magnitude;
  offsets[at] = offset;
}

/**
 * Leaves in `heap.offsets[0 … kept)` the offsets of the `kept` largest magnitudes of
 * `values[start … end)`, ties going to the lower index, in increasing order. Refuses a non-finite
 * value.
 */
function selectTop(values: Float32Array, start: number, end: number, kept: number, heap: Selection): void {
  const { magnitudes, offsets } = heap;
  for (let i = start; i < end; i++) {
    const x = values[i] ?? 0;
    if (!Number.isFinite(x)) throw nonFiniteInput("topk", i, x);
    const magnitude = Math.abs(x);
    const offset = i - start;
    if (offset < kept) {
      magnitudes[offset] = magnitude;
      offsets[offset] = offset;
      if (offset === kept - 1) {
        for (let at = (kept >> 1) - 1; at >= 0; at--) siftDown(heap, kept, at);
      }
    } else if (magnitude > (magnitudes[0] ?? 0)) {
      // A later offset only displaces the weakest kept one with a strictly larger magnitude.
      magnitudes[0] = magnitude;
      offsets[0] = offset;
      siftDown(heap, kept, 0);
    }
  }
  offsets.subarray(0, kept).sort();
}

/**
 * The 1-bit magnitude quantizer of a block's kept magnitudes (`sorted`, increasing): the split into a
 * low and a high group, contiguous in magnitude, whose group means give the least squared error
 * (1-D 2-means, solved exactly over every split). Returns the smallest magnitude of the high
 * group; a split never separates equal magnitudes, so "high" is simply "≥ threshold". Float64 sums
 * in a fixed order: every machine picks the same split.
 */
function highThreshold(sorted: Float64Array, kept: number): number {
  let total = 0;
  for (let j = 0; j < kept; j++) total += sorted[j] ?? 0;
  let best = -1;
  let bestSplit = 0;
  let low = 0;
  for (let split = 0; split < kept; split++) {
    if (split > 0) low += sorted[split - 1] ?? 0;
    if (split > 0 && (sorted[split - 1] ?? 0) === (sorted[split] ?? 0)) continue;
    const high = total - low;
    const score = (split > 0 ? (low * low) / split : 0) + (high * high) / (kept - split);
    if (score > best) {
      best = score;
      bestSplit = split;
    }
  }
  return sorted[bestSplit] ?? 0;
}

/**
 * Sparse top-k with 2-bit values (SparseLoCo-style): blocks of 4,096 elements, each keeps its
 * k = max(1, ceil(density · length)) largest magnitudes (ties to the lower index) and drops the
 * rest. A kept value is sent as a sign bit and a level bit: the block's two float32 levels are the
 * mean magnitudes of the kept values below and from the error-minimizing split (see
 * `highThreshold`). The positions go Rice-coded, as a uint16 list or as a bitmap, whichever is
 * smallest (see `block-index.ts`). At 1.5 %, a full block with its positions spread is 92 bytes:
 * 0.18 bits per element, 178× smaller than float32 (SparseLoCo's 12-bit indices: 146×). Most of
 * the input is dropped, so this codec is meant to be used with error feedback
 * (`compressWithFeedback`), which carries what a round did not send into the next.
 *
 * Layout after the common header: uint32 block size, then per block: uint8 index kind, uint16 k
 * (see `block-index.ts`), float32 low level, float32 high level, the index, then ceil(k / 4)
 * bytes of codes, 2 bits per kept value in index order (bit 2j: negative, bit 2j + 1: high level;
 * unused bits zero). `bitsPerElement` counts every byte of a full block, levels and index included
 * (the index at its typical size, positions spread evenly): they are the payload here, and chunks
 * are sized by what goes on the wire.
 * Refuses NaN and infinite inputs with MALFORMED_MESSAGE.
 */
export function topkCodec(density: number = DEFAULT_TOPK_DENSITY): Codec {
  if (!(density > 0 && density <= 1)) {
    throw new SwarmError(SwarmErrorCode.MALFORMED_MESSAGE, `top-k density ${density} is not in (0, 1]`);
  }
  const fullKept = keptCount(TOPK_BLOCK_SIZE, density);
  return Object.freeze({
    name: "topk" as const,
    bitsPerElement: (8 * blockBytes(TOPK_BLOCK_SIZE, fullKept, typicalIndexBytes)) / TOPK_BLOCK_SIZE,

    compress(values: Float32Array): Uint8Array {
      const n = values.length;
      const out = allocateEncoded("topk", n, bodyBytes(n, density, maxIndexBytes));
      const view = viewOf(out);
      view.setUint32(HEADER_BYTES, TOPK_BLOCK_SIZE, true);
      const most = Math.min(n, fullKept);
      const heap: Selection = {
        magnitudes: new Float64Array(most),
        offsets: new Int32Array(most),
        sorted: new Float64Array(most),
      };
      let at = HEADER_BYTES + BLOCK_SIZE_BYTES;
      for (let start = 0; start < n; start += TOPK_BLOCK_SIZE) {
        const end = Math.min(n, start + TOPK_BLOCK_SIZE);
        const length = end - start;
        const kept = keptCount(length, density);
        selectTop(values, start, end, kept, heap);
        const { offsets, sorted } = heap;
        for (let j = 0; j < kept; j++) sorted[j] = Math.abs(values[start + (offsets[j] ?? 0)] ?? 0);
        sorted.subarray(0, kept).sort();
        const threshold = highThreshold(sorted, kept);
        let lowSum = 0;
        let lowCount = 0;
        let highSum = 0;
        for (let j = 0; j < kept; j++) {
          const magnitude = Math.abs(values[start + (offsets[j] ?? 0)] ?? 0);
          if (magnitude >= threshold) highSum += magnitude;
          else {
            lowSum += magnitude;
            lowCount++;
          }
        }
        const levelsAt = at + BLOCK_HEADER_BYTES;
        view.setFloat32(levelsAt, lowCount === 0 ? 0 : lowSum / lowCount, true);
        view.setFloat32(levelsAt + 4, highSum / (kept - lowCount), true);
        const codesAt = writeBlockIndex(out, view, at, LEVELS_BYTES, length, offsets, kept);
        for (let j = 0; j < kept; j++) {
          const x = values[start + (offsets[j] ?? 0)] ?? 0;
          const code = (x < 0 ? 1 : 0) | (Math.abs(x) >= threshold ? 2 : 0);
          out[codesAt + (j >> 2)] = (out[codesAt + (j >> 2)] ?? 0) | (code << (2 * (j & 3)));
        }
        at = codesAt + Math.ceil(kept / 4);
      }
      // Rice-coded indexes take less than the room made for a list or bitmap.
      return at === out.length ? out : out.slice(0, at);
    },

    estimateRatio(length: number): number {
      return ratioOf(HEADER_BYTES + bodyBytes(length, density, typicalIndexBytes), length);
    },

    decode: decodeTopk,
  });
}

/** Decodes a topk body (whatever density it was encoded with: k is in the bytes). */
function decodeTopk(body: Uint8Array, count: number): Float32Array {
  if (body.length < BLOCK_SIZE_BYTES) {
    throw malformed(`topk body is truncated: ${body.length} bytes, no block size`);
  }
  const view = viewOf(body);
  const blockSize = view.getUint32(0, true);
  if (blockSize === 0 || blockSize > MAX_SPARSE_BLOCK_SIZE) {
    throw malformed(`topk block size ${blockSize} is not in [1, ${MAX_SPARSE_BLOCK_SIZE}]`);
  }
  const blocks = Math.ceil(count / blockSize);
  // Every block takes at least its header, its levels, one index byte and one code byte.
  if (BLOCK_SIZE_BYTES + blocks * (BLOCK_HEADER_BYTES + LEVELS_BYTES + 2) > body.length) {
    throw malformed(`topk body is truncated: ${body.length} bytes cannot hold ${blocks} blocks`);
  }
  const out = new Float32Array(count);
  const offsets = new Int32Array(Math.min(count, blockSize));
  let at = BLOCK_SIZE_BYTES;
  for (let block = 0; block < blocks; block++) {
    const start = block * blockSize;
    const length = Math.min(blockSize, count - start);
    const header = readBlockHeader("topk", body, view, at, block, length, 1);
    const levelsAt = at + BLOCK_HEADER_BYTES;
    const indexAt = levelsAt + LEVELS_BYTES;
    if (indexAt > body.length) {
      throw truncated("topk", body, block);
    }
    const low = view.getFloat32(levelsAt, true);
    const high = view.getFloat32(levelsAt + 4, true);
    if (!(low >= 0 && low <= high && Number.isFinite(high))) {
      throw malformed(`topk block ${block} has levels ${low} and ${high}, not 0 ≤ low ≤ high < ∞`);
    }
    const codesAt = readBlockIndex("topk", body, view, indexAt, block, length, header, offsets);
    const end = codesAt + Math.ceil(header.count / 4);
    if (end > body.length) {
      throw truncated("topk", body, block);
    }
    for (let j = 0; j < header.count; j++) {
      const code = ((body[codesAt + (j >> 2)] ?? 0) >> (2 * (j & 3))) & 3;
      const magnitude = (code & 2) === 0 ? low : high;
      out[start + (offsets[j] ?? 0)] = (code & 1) === 0 ? magnitude : -magnitude;
    }
    const unused = header.count & 3;
    if (unused !== 0 && (body[end - 1] ?? 0) >> (2 * unused) !== 0) {
      throw malformed(`topk block ${block} sets unused code bits`);
    }
    at = end;
  }
  expectBodySize("topk", body, at);
  return out;
}
