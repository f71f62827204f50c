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

/** Largest number of elements the quantiles are computed from (evenly strided over the vector). */
export const QUANTILE_SAMPLE_SIZE = 65_536;

const LEVELS = 256;
/** Parameters before the payload: the codebook, one float32 per level. */
const CODEBOOK_BYTES = LEVELS * 4;

/**
 * The 255 bucket borders: the k/256 quantiles (k = 1 … 255) of a deterministic sample of
 * `values`, at most QUANTILE_SAMPLE_SIZE elements taken at evenly strided indices. Index 255 holds
 * +Infinity so the branch-free search below never reads past the end.
 */
function bucketBorders(values: Float32Array): Float64Array {
  const n = values.length;
  const sampleSize = Math.min(n, QUANTILE_SAMPLE_SIZE);
  const sample = new Float32Array(sampleSize);
  // i · n < 2^16 · 2^32 is exact in a double, so the indices are the same on every machine.
  for (let i = 0; i < sampleSize; i++) sample[i] = values[Math.floor((i * n) / sampleSize)] ?? 0;
  sample.sort();
  const borders = new Float64Array(LEVELS);
  for (let k = 1; k < LEVELS; k++) {
    borders[k - 1] = sample[Math.floor((k * sampleSize) / LEVELS)] ?? 0;
  }
  borders[LEVELS - 1] = Infinity;
  return borders;
}

/**
 * How many of the (sorted) borders are ≤ `x`: the index of x's bucket, 0 … 255. Counting equal
 * borders puts each of up to 256 distinct values in its own bucket, so those decode exactly.
 */
function bucketOf(borders: Float64Array, x: number): number {
  let bucket = 0;
  for (let step = LEVELS >>> 1; step > 0; step >>>= 1) {
    if ((borders[bucket + step - 1] ?? Infinity) <= x) bucket += step;
  }
  return bucket;
}

/**
 * 8-bit quantile quantization (hivemind's Quantile8BitQuantization): 256 buckets bounded by the
 * data's quantiles, so each bucket holds about as many values; each value is sent as its bucket's
 * index and decoded as the mean of the values in that bucket (a float32 codebook of 256 entries
 * travels with the vector). Fits any distribution without a scale, at the cost of a sort of the
 * sample and a 1 KiB codebook. Refuses NaN and infinite inputs with MALFORMED_MESSAGE.
 */
export const quantile8Codec: Codec = Object.freeze({
  name: "quantile8" as const,
  bitsPerElement: 8,

  compress(values: Float32Array): Uint8Array {
    const n = values.length;
    const borders = bucketBorders(values);
    const sums = new Float64Array(LEVELS);
    const counts = new Float64Array(LEVELS);
    const out = allocateEncoded("quantile8", n, CODEBOOK_BYTES + n);
    const codesStart = HEADER_BYTES + CODEBOOK_BYTES;
    for (let i = 0; i < n; i++) {
      const x = values[i] ?? 0;
      if (!Number.isFinite(x)) throw nonFiniteInput("quantile8", i, x);
      const bucket = bucketOf(borders, x);
      out[codesStart + i] = bucket;
      sums[bucket] = (sums[bucket] ?? 0) + x;
      counts[bucket] = (counts[bucket] ?? 0) + 1;
    }
    const view = viewOf(out);
    for (let bucket = 0; bucket < LEVELS; bucket++) {
      const count = counts[bucket] ?? 0;
      // The summation order is fixed, so every machine computes the same means.
      const mean = count === 0 ? 0 : (sums[bucket] ?? 0) / count;
      view.setFloat32(HEADER_BYTES + bucket * 4, mean, true);
    }
    return out;
  },

  estimateRatio(length: number): number {
    return ratioOf(HEADER_BYTES + CODEBOOK_BYTES + length, length);
  },

  decode(body: Uint8Array, count: number): Float32Array {
    expectBodySize("quantile8", body, CODEBOOK_BYTES + count);
    const view = viewOf(body);
    const codebook = new Float32Array(LEVELS);
    for (let bucket = 0; bucket < LEVELS; bucket++) {
      const value = view.getFloat32(bucket * 4, true);
      if (!Number.isFinite(value)) {
        throw malformed(`quantile8 codebook entry ${bucket} is ${value}, not finite`);
      }
      codebook[bucket] = value;
    }
    const out = new Float32Array(count);
    for (let i = 0; i < count; i++) out[i] = codebook[body[CODEBOOK_BYTES + i] ?? 0] ?? 0;
    return out;
  },
});
