import {
  allocateEncoded,
  expectBodySize,
  HEADER_BYTES,
  NATIVE_LITTLE_ENDIAN,
  ratioOf,
  viewOf,
  type Codec,
} from "./wire.ts";

/** Bytes per element on the wire. */
const ELEMENT_BYTES = 4;

/**
 * No compression: raw float32, little-endian. Bit-exact in both directions (NaN and infinities
 * included), the baseline the other codecs are measured against.
 */
export const noneCodec: Codec = Object.freeze({
  name: "none" as const,
  bitsPerElement: 32,

  compress(values: Float32Array): Uint8Array {
    const out = allocateEncoded("none", values.length, values.length * ELEMENT_BYTES);
    if (NATIVE_LITTLE_ENDIAN) {
      out.set(new Uint8Array(values.buffer, values.byteOffset, values.byteLength), HEADER_BYTES);
    } else {
      const view = viewOf(out);
      for (let i = 0; i < values.length; i++) {
        view.setFloat32(HEADER_BYTES + i * ELEMENT_BYTES, values[i] ?? 0, true);
      }
    }
    return out;
  },

  estimateRatio(length: number): number {
    return ratioOf(HEADER_BYTES + length * ELEMENT_BYTES, length);
  },

  decode(body: Uint8Array, count: number): Float32Array {
    expectBodySize("none", body, count * ELEMENT_BYTES);
    if (NATIVE_LITTLE_ENDIAN) {
      // Copy into a fresh, aligned buffer, which becomes the result's storage. (Not `slice()`: on a
      // Node Buffer that returns a view into Node's shared pool.)
      return new Float32Array(new Uint8Array(body).buffer);
    }
    const out = new Float32Array(count);
    const view = viewOf(body);
    for (let i = 0; i < count; i++) out[i] = view.getFloat32(i * ELEMENT_BYTES, true);
    return out;
  },
});
