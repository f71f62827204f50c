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

/** Elements per block; each block carries its own scale. The last block may be shorter. */
export const BLOCK_SIZE = 4096;

/** Parameter before the scales: uint32 block size (so a decoder never assumes it). */
const BLOCK_SIZE_BYTES = 4;
const SCALE_BYTES = 4;
const MAX_CODE = 127;

function blockCount(length: number, blockSize: number): number {
  return Math.ceil(length / blockSize);
}

/** Round half away from zero, so that round(−x) = −round(x) and the code range stays symmetric. */
function roundSymmetric(q: number): number {
  return q >= 0 ? Math.round(q) : -Math.round(-q);
}

/**
 * Blockwise 8-bit quantization (bitsandbytes-style, linear): blocks of 4,096 elements, each with
 * a float32 absmax scale and int8 codes in [−127, 127], code = round(x · 127 / absmax). The
 * absolute error is ≤ absmax / 254 within each block, so an outlier only costs precision in its
 * own block. Layout: uint32 block size, one float32 scale per block, then the int8 codes.
 * Refuses NaN and infinite inputs with MALFORMED_MESSAGE.
 */
export const blockwise8Codec: Codec = Object.freeze({
  name: "blockwise8" as const,
  bitsPerElement: 8,

  compress(values: Float32Array): Uint8Array {
    const n = values.length;
    const blocks = blockCount(n, BLOCK_SIZE);
    const codesStart = HEADER_BYTES + BLOCK_SIZE_BYTES + blocks * SCALE_BYTES;
    const out = allocateEncoded("blockwise8", n, codesStart - HEADER_BYTES + n);
    const view = viewOf(out);
    view.setUint32(HEADER_BYTES, BLOCK_SIZE, true);
    const codes = new Int8Array(out.buffer, codesStart, n);
    for (let block = 0; block < blocks; block++) {
      const start = block * BLOCK_SIZE;
      const end = Math.min(start + BLOCK_SIZE, n);
      let absmax = 0;
      for (let i = start; i < end; i++) {
        const x = values[i] ?? 0;
        if (!Number.isFinite(x)) throw nonFiniteInput("blockwise8", i, x);
        const magnitude = Math.abs(x);
        if (magnitude > absmax) absmax = magnitude;
      }
      // absmax is a float32 value already, so storing it is exact.
      view.setFloat32(HEADER_BYTES + BLOCK_SIZE_BYTES + block * SCALE_BYTES, absmax, true);
      if (absmax === 0) continue; // an all-zero block keeps codes 0
      const inverse = MAX_CODE / absmax;
      for (let i = start; i < end; i++) {
        const code = roundSymmetric((values[i] ?? 0) * inverse);
        codes[i] = code > MAX_CODE ? MAX_CODE : code < -MAX_CODE ? -MAX_CODE : code;
      }
    }
    return out;
  },

  estimateRatio(length: number): number {
    const blocks = blockCount(length, BLOCK_SIZE);
    return ratioOf(HEADER_BYTES + BLOCK_SIZE_BYTES + blocks * SCALE_BYTES + length, length);
  },

  decode(body: Uint8Array, count: number): Float32Array {
    if (body.length < BLOCK_SIZE_BYTES) {
      throw malformed(`blockwise8 body is truncated: ${body.length} bytes, no block size`);
    }
    const view = viewOf(body);
    const blockSize = view.getUint32(0, true);
    if (blockSize === 0) throw malformed("blockwise8 block size is 0");
    const blocks = blockCount(count, blockSize);
    const codesStart = BLOCK_SIZE_BYTES + blocks * SCALE_BYTES;
    expectBodySize("blockwise8", body, codesStart + count);
    const codes = new Int8Array(body.buffer, body.byteOffset + codesStart, count);
    const out = new Float32Array(count);
    for (let block = 0; block < blocks; block++) {
      const scale = view.getFloat32(BLOCK_SIZE_BYTES + block * SCALE_BYTES, true);
      if (!Number.isFinite(scale) || !(scale >= 0)) {
        throw malformed(`blockwise8 block ${block} has scale ${scale}, not a finite absmax`);
      }
      const factor = scale / MAX_CODE;
      const start = block * blockSize;
      const end = Math.min(start + blockSize, count);
      for (let i = start; i < end; i++) {
        const code = codes[i] ?? 0;
        if (code < -MAX_CODE) throw malformed(`blockwise8 code -128 at index ${i}`);
        out[i] = code * factor;
      }
    }
    return out;
  },
});
