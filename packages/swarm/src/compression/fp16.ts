import { allocateEncoded, expectBodySize, HEADER_BYTES, ratioOf, type Codec } from "./wire.ts";

/** Bytes per element on the wire. */
const ELEMENT_BYTES = 2;

/** Bits of the largest finite half, ±65504, which out-of-range finite values saturate to. */
const HALF_MAX_BITS = 0x7bff;
const HALF_INFINITY_BITS = 0x7c00;
const HALF_NAN_BITS = 0x7e00;
/** float32 bits of 65520, halfway between 65504 and 2^16: from here on, IEEE rounds to infinity. */
const FLOAT_OVERFLOW_BITS = 0x477f_f000;
/** float32 bits of 2^-14, the smallest normal half. */
const FLOAT_HALF_NORMAL_BITS = 0x3880_0000;
/** Rebiases a float32 exponent (bias 127) to a half exponent (bias 15), in float32 bit position. */
const EXPONENT_REBIAS = (127 - 15) << 23;

/**
 * The IEEE 754 binary16 bits nearest to the float32 with bits `bits`, ties to even. Finite values
 * beyond the half range (|x| ≥ 65520 would round to infinity) saturate to ±65504 instead, so a
 * large but finite gradient stays finite; ±Infinity stays ±Infinity and NaN stays NaN.
 */
export function halfBitsFromFloatBits(bits: number): number {
  const sign = (bits >>> 16) & 0x8000;
  const magnitude = bits & 0x7fff_ffff;
  if (magnitude >= FLOAT_OVERFLOW_BITS) {
    if (magnitude < 0x7f80_0000) return sign | HALF_MAX_BITS;
    return sign | (magnitude === 0x7f80_0000 ? HALF_INFINITY_BITS : HALF_NAN_BITS);
  }
  if (magnitude >= FLOAT_HALF_NORMAL_BITS) {
    // Rebias, then drop 13 mantissa bits rounding to nearest even without a branch: add just under
    // half an ulp, plus one when the kept part is odd. A carry into the exponent is still correct.
    return sign | ((magnitude - EXPONENT_REBIAS + 0xfff + ((magnitude >>> 13) & 1)) >>> 13);
  }
  // Subnormal half (or zero): the value in units of 2^-24, rounded to nearest even.
  const shift = 126 - (magnitude >>> 23); // 14 for 2^-15 … 24 for 2^-25
  if (shift > 24) return sign; // below 2^-25 (float32 subnormals included): rounds to zero
  const significand = (magnitude & 0x7f_ffff) | 0x80_0000;
  let half = significand >>> shift;
  const dropped = significand & ((1 << shift) - 1);
  const halfway = 1 << (shift - 1);
  if (dropped > halfway || (dropped === halfway && (half & 1) === 1)) half++;
  return sign | half;
}

/** The float value of every half bit pattern, built on first decode (256 KiB). */
let halfTable: Float32Array | undefined;

/** The float value of every half bit pattern (index = the 16 bits), built on first use. */
export function halfToFloatTable(): Float32Array {
  if (halfTable !== undefined) return halfTable;
  const table = new Float32Array(0x1_0000);
  for (let bits = 0; bits < 0x1_0000; bits++) {
    const sign = (bits & 0x8000) === 0 ? 1 : -1;
    const exponent = (bits >>> 10) & 0x1f;
    const mantissa = bits & 0x3ff;
    if (exponent === 0) table[bits] = sign * mantissa * 2 ** -24;
    else if (exponent === 0x1f) table[bits] = mantissa === 0 ? sign * Infinity : NaN;
    else table[bits] = sign * (0x400 + mantissa) * 2 ** (exponent - 25);
  }
  halfTable = table;
  return table;
}

/**
 * IEEE half precision: 2 bytes per element, round to nearest even, relative error ≤ 2^-11 in the
 * normal range (|x| ≥ 2^-14). Finite values beyond ±65504 saturate to ±65504 (IEEE would give
 * infinity); NaN stays NaN and ±Infinity stays ±Infinity.
 */
export const fp16Codec: Codec = Object.freeze({
  name: "fp16" as const,
  bitsPerElement: 16,

  compress(values: Float32Array): Uint8Array {
    const out = allocateEncoded("fp16", values.length, values.length * ELEMENT_BYTES);
    // Float32Array offsets are multiples of 4, so the same memory reads as float bits.
    const bits = new Uint32Array(values.buffer, values.byteOffset, values.length);
    for (let i = 0, o = HEADER_BYTES; i < bits.length; i++, o += ELEMENT_BYTES) {
      const half = halfBitsFromFloatBits(bits[i] ?? 0);
      out[o] = half & 0xff;
      out[o + 1] = half >>> 8;
    }
    return out;
  },

  estimateRatio(length: number): number {
    return ratioOf(HEADER_BYTES + length * ELEMENT_BYTES, length);
  },

  decode(body: Uint8Array, count: number): Float32Array {
    expectBodySize("fp16", body, count * ELEMENT_BYTES);
    const table = halfToFloatTable();
    const out = new Float32Array(count);
    for (let i = 0, o = 0; i < count; i++, o += ELEMENT_BYTES) {
      out[i] = table[(body[o] ?? 0) | ((body[o + 1] ?? 0) << 8)] ?? 0;
    }
    return out;
  },
});
