import {
  BLOCK_HEADER_BYTES,
  MAX_SPARSE_BLOCK_SIZE,
  maxIndexBytes,
  readBlockHeader,
  readBlockIndex,
  truncated,
  writeBlockIndex,
} from "./block-index.ts";
import { halfBitsFromFloatBits, halfToFloatTable } from "./fp16.ts";
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

/** Elements per block; each block lists its own nonzeros. The last may be shorter. */
export const SPARSE_BLOCK_SIZE = 4096;

/** Parameter before the blocks: uint32 block size. */
const BLOCK_SIZE_BYTES = 4;
const VALUE_BYTES = 2;
const HALF_MAGNITUDE = 0x7fff;
const HALF_EXPONENT = 0x7c00;

/** The most encoded bytes of a block of `length` elements with `count` nonzeros. */
function blockBytes(length: number, count: number): number {
  return maxIndexBytes(length, count) + VALUE_BYTES * count;
}

/**
 * Every nonzero with its fp16 value, for the averaged results of a topk round: the mean of k-sparse
 * contributions is nonzero on the union of their supports, and re-sparsifying it would drop what
 * the senders' error feedback accounted as delivered. Per block of 4,096 elements the positions of
 * the values whose fp16 is not ±0 go Rice-coded, as a uint16 list or as a bitmap, whichever is
 * smallest (see `block-index.ts`), followed by those values (IEEE half, round to nearest even,
 * finite values beyond ±65504 saturate); every other element decodes as 0. The size follows the
 * data: at most 4 bytes per nonzero while fewer than 1/16 of a block is nonzero (about 2.8 at
 * 6 %, the union of four 1.5 % contributions), and 2 bytes per nonzero plus 1 bit per element
 * beyond.
 *
 * Layout after the common header: uint32 block size, then per block: uint8 index kind, uint16 count
 * (see `block-index.ts`), the index, then `count` uint16 fp16 values in index order (none ±0,
 * none infinite or NaN). `bitsPerElement` and `estimateRatio` are those of a dense vector (every
 * element nonzero), the most it can take. Refuses NaN and infinite inputs with MALFORMED_MESSAGE.
 */
export const sparseCodec: Codec = Object.freeze({
  name: "sparse" as const,
  bitsPerElement: 17,

  compress(values: Float32Array): Uint8Array {
    const n = values.length;
    // Float32Array offsets are multiples of 4, so the same memory reads as float bits.
    const bits = new Uint32Array(values.buffer, values.byteOffset, n);
    const halves = new Uint16Array(n);
    let size = BLOCK_SIZE_BYTES;
    for (let start = 0; start < n; start += SPARSE_BLOCK_SIZE) {
      const end = Math.min(n, start + SPARSE_BLOCK_SIZE);
      let count = 0;
      for (let i = start; i < end; i++) {
        const x = values[i] ?? 0;
        if (!Number.isFinite(x)) throw nonFiniteInput("sparse", i, x);
        const half = halfBitsFromFloatBits(bits[i] ?? 0);
        halves[i] = half;
        if ((half & HALF_MAGNITUDE) !== 0) count++;
      }
      size += blockBytes(end - start, count);
    }
    const out = allocateEncoded("sparse", n, size);
    const view = viewOf(out);
    view.setUint32(HEADER_BYTES, SPARSE_BLOCK_SIZE, true);
    const offsets = new Int32Array(Math.min(n, SPARSE_BLOCK_SIZE));
    let at = HEADER_BYTES + BLOCK_SIZE_BYTES;
    for (let start = 0; start < n; start += SPARSE_BLOCK_SIZE) {
      const end = Math.min(n, start + SPARSE_BLOCK_SIZE);
      let count = 0;
      for (let i = start; i < end; i++)
        if (((halves[i] ?? 0) & HALF_MAGNITUDE) !== 0) offsets[count++] = i - start;
      let valuesAt = writeBlockIndex(out, view, at, 0, end - start, offsets, count);
      for (let j = 0; j < count; j++, valuesAt += VALUE_BYTES) {
        view.setUint16(valuesAt, halves[start + (offsets[j] ?? 0)] ?? 0, true);
      }
      at = valuesAt;
    }
    return at === out.length ? out : out.slice(0, at);
  },

  estimateRatio(length: number): number {
    const fullBlocks = Math.floor(length / SPARSE_BLOCK_SIZE);
    const rest = length - fullBlocks * SPARSE_BLOCK_SIZE;
    const body =
      BLOCK_SIZE_BYTES +
      fullBlocks * blockBytes(SPARSE_BLOCK_SIZE, SPARSE_BLOCK_SIZE) +
      (rest > 0 ? blockBytes(rest, rest) : 0);
    return ratioOf(HEADER_BYTES + body, length);
  },

  decode(body: Uint8Array, count: number): Float32Array {
    if (body.length < BLOCK_SIZE_BYTES) {
      throw malformed(`sparse body is truncated: ${body.length} bytes, no block size`);
    }
    const view = viewOf(body);
    const blockSize = view.getUint32(0, true);
    if (blockSize === 0 || blockSize > MAX_SPARSE_BLOCK_SIZE) {
      throw malformed(`sparse block size ${blockSize} is not in [1, ${MAX_SPARSE_BLOCK_SIZE}]`);
    }
    const blocks = Math.ceil(count / blockSize);
    if (BLOCK_SIZE_BYTES + blocks * BLOCK_HEADER_BYTES > body.length) {
      throw malformed(`sparse body is truncated: ${body.length} bytes cannot hold ${blocks} blocks`);
    }
    const table = halfToFloatTable();
    const out = new Float32Array(count);
    const offsets = new Int32Array(Math.min(count, blockSize));
    let at = BLOCK_SIZE_BYTES;
    for (let block = 0; block < blocks; block++) {
      const start = block * blockSize;
      const length = Math.min(blockSize, count - start);
      const header = readBlockHeader("sparse", body, view, at, block, length, 0);
      const indexAt = at + BLOCK_HEADER_BYTES;
      const valuesAt = readBlockIndex("sparse", body, view, indexAt, block, length, header, offsets);
      const end = valuesAt + VALUE_BYTES * header.count;
      if (end > body.length) {
        throw truncated("sparse", body, block);
      }
      for (let j = 0; j < header.count; j++) {
        const half = view.getUint16(valuesAt + VALUE_BYTES * j, true);
        if ((half & HALF_MAGNITUDE) === 0 || (half & HALF_EXPONENT) === HALF_EXPONENT) {
          throw malformed(
            `sparse block ${block} sends the value 0x${half.toString(16)}, not a finite nonzero`,
          );
        }
        out[start + (offsets[j] ?? 0)] = table[half] ?? 0;
      }
      at = end;
    }
    expectBodySize("sparse", body, at);
    return out;
  },
});
