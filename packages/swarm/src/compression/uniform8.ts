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

/** Parameters before the payload: float32 min, float32 max. */
const PARAM_BYTES = 8;
const LEVELS = 256;

/**
 * 8-bit uniform quantization: one global min and max, 256 evenly spaced levels between them, each
 * value rounded to the nearest level (absolute error ≤ (max − min) / 510). Cheap, but one outlier
 * widens the range for every other value; blockwise8 and quantile8 are more robust to that.
 * Refuses NaN and infinite inputs with MALFORMED_MESSAGE.
 */
export const uniform8Codec: Codec = Object.freeze({
  name: "uniform8" as const,
  bitsPerElement: 8,

  compress(values: Float32Array): Uint8Array {
    const n = values.length;
    let min = n === 0 ? 0 : Infinity;
    let max = n === 0 ? 0 : -Infinity;
    for (let i = 0; i < n; i++) {
      const x = values[i] ?? 0;
      if (!Number.isFinite(x)) throw nonFiniteInput("uniform8", i, x);
      if (x < min) min = x;
      if (x > max) max = x;
    }
    const out = allocateEncoded("uniform8", n, PARAM_BYTES + n);
    const view = viewOf(out);
    // min and max are float32 values already, so storing them is exact.
    view.setFloat32(HEADER_BYTES, min, true);
    view.setFloat32(HEADER_BYTES + 4, max, true);
    const range = max - min;
    if (range > 0) {
      const scale = (LEVELS - 1) / range;
      const start = HEADER_BYTES + PARAM_BYTES;
      for (let i = 0; i < n; i++) {
        const code = Math.round(((values[i] ?? 0) - min) * scale);
        out[start + i] = code > LEVELS - 1 ? LEVELS - 1 : code;
      }
    } // else every value equals min: the codes stay 0.
    return out;
  },

  estimateRatio(length: number): number {
    return ratioOf(HEADER_BYTES + PARAM_BYTES + length, length);
  },

  decode(body: Uint8Array, count: number): Float32Array {
    expectBodySize("uniform8", body, PARAM_BYTES + count);
    const view = viewOf(body);
    const min = view.getFloat32(0, true);
    const max = view.getFloat32(4, true);
    if (!Number.isFinite(min) || !Number.isFinite(max) || !(min <= max)) {
      throw malformed(`uniform8 range [${min}, ${max}] is not a finite interval`);
    }
    const step = (max - min) / (LEVELS - 1);
    const levels = new Float32Array(LEVELS);
    for (let code = 0; code < LEVELS; code++) levels[code] = min + code * step;
    const out = new Float32Array(count);
    for (let i = 0; i < count; i++) out[i] = levels[body[PARAM_BYTES + i] ?? 0] ?? 0;
    return out;
  },
});
