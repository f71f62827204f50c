import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import { SwarmErrorCode, isSwarmError } from "../../src/errors.ts";
import { CODEC_NAMES, compressorFor, decompress } from "../../src/compression/index.ts";
import { seededRandom as rng } from "../support/seeded-random.ts";

function normal(n: number, seed: number, sigma = 1): Float32Array {
  const next = rng(seed);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    out[i] = sigma * Math.sqrt(-2 * Math.log(1 - next())) * Math.cos(2 * Math.PI * next());
  }
  return out;
}

/** Normal values with one in 200 multiplied by 1,000. */
function withOutliers(n: number, seed: number): Float32Array {
  const out = normal(n, seed);
  for (let i = 7; i < n; i += 200) out[i] = (out[i] ?? 0) * 1000;
  return out;
}

function roundTrip(name: (typeof CODEC_NAMES)[number], values: Float32Array): Float32Array {
  return decompress(compressorFor(name, values.length).compress(values), values.length);
}

function maxAbsError(a: Float32Array, b: Float32Array): number {
  let max = 0;
  for (let i = 0; i < a.length; i++) max = Math.max(max, Math.abs((a[i] ?? 0) - (b[i] ?? 0)));
  return max;
}

function relativeRmse(original: Float32Array, decoded: Float32Array): number {
  let error = 0;
  let norm = 0;
  for (let i = 0; i < original.length; i++) {
    const x = original[i] ?? 0;
    error += (x - (decoded[i] ?? 0)) ** 2;
    norm += x * x;
  }
  return Math.sqrt(error / norm);
}

function range(values: Float32Array): number {
  return Math.max(...values) - Math.min(...values);
}

const f16round = (Math as unknown as { f16round: (x: number) => number }).f16round;

describe("every codec", () => {
  it.each(CODEC_NAMES)("%s encodes an empty vector", (name) => {
    const bytes = compressorFor(name, 0).compress(new Float32Array(0));
    expect(decompress(bytes, 0)).toEqual(new Float32Array(0));
  });

  it.each(CODEC_NAMES)("%s reports the ratio of its actual encoded size", (name) => {
    for (const n of [0, 1, 255, 4095, 4096, 4097, 70_000]) {
      const compressor = compressorFor(name, n);
      const bytes = compressor.compress(normal(n, n + 1));
      const estimate = compressor.estimateRatio(n) * 4 * Math.max(n, 1);
      // topk estimates its Rice-coded positions as if spread evenly; where they land moves a few bytes.
      if (name === "topk") expect(Math.abs(estimate - bytes.length)).toBeLessThanOrEqual(0.06 * bytes.length);
      else expect(estimate).toBeCloseTo(bytes.length, 6);
    }
  });

  it.each(CODEC_NAMES)("%s is deterministic, leaves its input alone and reads subarrays", (name) => {
    const backing = withOutliers(10_003, 5);
    const values = backing.subarray(3); // a non-zero byte offset
    const copy = values.slice();
    const compressor = compressorFor(name, values.length);
    const first = compressor.compress(values);
    expect(compressor.compress(copy)).toEqual(first);
    expect(values).toEqual(copy);
    // Decoding reads bytes at any offset, including an odd one.
    const shifted = new Uint8Array(first.length + 1);
    shifted.set(first, 1);
    expect(decompress(shifted.subarray(1), values.length)).toEqual(decompress(first, values.length));
  });

  it("produces the same bytes as the reference run (the format is frozen)", () => {
    // Only exact arithmetic here (no log/cos, which may differ across platforms in the last bit).
    const next = rng(11);
    const values = new Float32Array(70_000).map((_, i) => {
      const bell = next() + next() + next() + next() - 2;
      return i % 500 === 0 ? bell * 1000 : bell;
    });
    const digests = Object.fromEntries(
      CODEC_NAMES.map((name) => [
        name,
        createHash("sha256")
          .update(compressorFor(name, values.length).compress(values))
          .digest("hex")
          .slice(0, 16),
      ]),
    );
    expect(digests).toEqual({
      none: "f73cc386ecc5f4aa",
      fp16: "c73e399bb1f4b415",
      uniform8: "a2a0809535d607bb",
      quantile8: "27eb4b91e14eebe3",
      blockwise8: "a2862ac0b83c615b",
      topk: "8037413ed40b21c4",
      sparse: "da9de0889a353272",
    });
  });

  it.each(["uniform8", "quantile8", "blockwise8"] as const)("%s refuses NaN and ±Infinity", (name) => {
    for (const bad of [NaN, Infinity, -Infinity]) {
      const values = normal(5000, 3);
      values[4500] = bad;
      try {
        compressorFor(name, values.length).compress(values);
        expect.unreachable(`${name} encoded ${bad}`);
      } catch (error) {
        expect(isSwarmError(error, SwarmErrorCode.MALFORMED_MESSAGE)).toBe(true);
        expect((error as Error).message).toContain("index 4500");
      }
    }
  });
});

describe("none", () => {
  it("round-trips every float32 bit pattern exactly, NaN payloads included", () => {
    const bits = new Uint32Array(20_000);
    const next = rng(1);
    for (let i = 0; i < bits.length; i++) bits[i] = Math.floor(next() * 2 ** 32);
    bits.set([0x7fc0_0001, 0xff80_0000, 0x8000_0000, 0x0000_0001], 0);
    const decoded = roundTrip("none", new Float32Array(bits.buffer));
    expect(new Uint32Array(decoded.buffer)).toEqual(bits);
  });
});

describe("fp16", () => {
  it("rounds like IEEE binary16 (ties to even) everywhere below the overflow threshold", () => {
    // Every finite half, the midpoint to the next one (a tie) and the float32 neighbours of both,
    // positive and negative, then random bit patterns around the half range and anywhere.
    const points: number[] = [];
    const neighbour = new Float32Array(1);
    const neighbourBits = new Uint32Array(neighbour.buffer);
    const around = (x: number): void => {
      neighbour[0] = x;
      const center = neighbourBits[0] ?? 0;
      for (const delta of [-1, 0, 1]) {
        neighbourBits[0] = center + delta;
        points.push(neighbour[0], -neighbour[0]);
      }
    };
    for (let half = 0; half < 0x7bff; half++) {
      const x = half < 0x400 ? half * 2 ** -24 : (0x400 + (half & 0x3ff)) * 2 ** ((half >>> 10) - 25);
      const step = half < 0x400 ? 2 ** -24 : 2 ** ((half >>> 10) - 25);
      around(x);
      around(x + step / 2);
    }
    const next = rng(2);
    const random = new Uint32Array(100_000).map((_, i) => {
      const bits = Math.floor(next() * 2 ** 32);
      return i % 2 === 0 ? bits : (bits & 0x807f_ffff) | ((96 + (bits % 48)) << 23);
    });
    const values = Float32Array.from([...points, ...new Float32Array(random.buffer)]);
    const decoded = roundTrip("fp16", values);
    const wrong: string[] = [];
    for (let i = 0; i < values.length; i++) {
      const x = values[i] ?? 0;
      if (Math.abs(x) >= 65_520) continue; // saturates instead, checked below
      if (!Object.is(decoded[i], f16round(x))) wrong.push(`${x} → ${decoded[i]}`);
    }
    expect(wrong.slice(0, 5)).toEqual([]);
  });

  it("keeps the relative error ≤ 2^-11 in the normal range", () => {
    const values = normal(50_000, 3, 100);
    const decoded = roundTrip("fp16", values);
    let worst = 0;
    for (let i = 0; i < values.length; i++) {
      const x = values[i] ?? 0;
      if (Math.abs(x) >= 2 ** -14) worst = Math.max(worst, Math.abs((decoded[i] ?? 0) - x) / Math.abs(x));
    }
    expect(worst).toBeGreaterThan(2 ** -12); // the bound is nearly reached: the test can see it
    expect(worst).toBeLessThanOrEqual(2 ** -11);
  });

  it("saturates finite overflow to ±65504 and keeps zeros' signs, infinities and NaN", () => {
    const values = Float32Array.of(70_000, -1e30, 65_519, 65_520, 3.4e38, -0, Infinity, -Infinity, NaN);
    const decoded = Array.from(roundTrip("fp16", values));
    expect(decoded).toEqual([65_504, -65_504, 65_504, 65_504, 65_504, -0, Infinity, -Infinity, NaN]);
    expect(Object.is(decoded[5], -0)).toBe(true);
  });

  it("breaks ties to even and flushes values below 2^-25 to zero", () => {
    const ulp = 2 ** -10;
    const values = Float32Array.of(1 + ulp / 2, 1 + (3 * ulp) / 2, 2 ** -25, 2 ** -25 * 1.5, 2 ** -26);
    expect(Array.from(roundTrip("fp16", values))).toEqual([1, 1 + 2 * ulp, 0, 2 ** -24, 0]);
  });
});

describe("uniform8", () => {
  it.each([
    ["normal", normal(30_000, 4)],
    ["outliers", withOutliers(30_000, 4)],
  ])("keeps the absolute error ≤ (max − min) / 510 on %s data", (_, values) => {
    const decoded = roundTrip("uniform8", values);
    const bound = range(values) / 510;
    expect(maxAbsError(values, decoded)).toBeLessThanOrEqual(bound * (1 + 1e-6));
    expect(decoded[values.indexOf(Math.min(...values))]).toBe(Math.min(...values));
  });

  it("decodes a constant vector exactly", () => {
    expect(roundTrip("uniform8", new Float32Array(1000).fill(-3.25))).toEqual(
      new Float32Array(1000).fill(-3.25),
    );
  });
});

describe("quantile8", () => {
  it("keeps the relative RMSE of normal data under 3 % (sampled quantiles)", () => {
    const values = normal(200_000, 5);
    expect(relativeRmse(values, roundTrip("quantile8", values))).toBeLessThan(0.03);
  });

  it("decodes each value as the mean of the values that share its bucket", () => {
    const values = withOutliers(100_000, 6);
    const bytes = compressorFor("quantile8", values.length).compress(values);
    const decoded = decompress(bytes, values.length);
    const codes = bytes.subarray(bytes.length - values.length);
    const sums = new Float64Array(256);
    const counts = new Float64Array(256);
    codes.forEach((code, i) => {
      sums[code] = (sums[code] ?? 0) + (values[i] ?? 0);
      counts[code] = (counts[code] ?? 0) + 1;
    });
    expect(counts.filter((count) => count > 0).length).toBeGreaterThan(250);
    const expected = Float32Array.from(codes, (code) => (sums[code] ?? 0) / (counts[code] ?? 1));
    expect(decoded).toEqual(expected);
  });

  it("is exact for up to 256 distinct values and for constant vectors", () => {
    const distinct = normal(256, 7);
    expect(roundTrip("quantile8", distinct)).toEqual(distinct);
    expect(roundTrip("quantile8", new Float32Array(5000).fill(0.1))).toEqual(
      new Float32Array(5000).fill(0.1),
    );
  });

  it("keeps the bulk precise next to huge outliers, which share the outermost buckets", () => {
    const values = withOutliers(100_000, 8);
    const decoded = roundTrip("quantile8", values);
    const errors = values.map((x, i) => Math.abs(x - (decoded[i] ?? 0))).sort();
    // The 0.5 % of outliers (and the few bulk values bucketed with them) are coarse; 98 % are not.
    expect(errors[Math.floor(0.98 * values.length)]).toBeLessThan(0.06);
    expect(Math.min(...decoded)).toBeGreaterThanOrEqual(Math.min(...values));
    expect(Math.max(...decoded)).toBeLessThanOrEqual(Math.max(...values));
  });
});

describe("blockwise8", () => {
  it("keeps each block's absolute error ≤ its absmax / 254, the short last block too", () => {
    const values = withOutliers(3 * 4096 + 100, 9);
    values[5000] = 1e6; // one huge outlier in block 1
    const decoded = roundTrip("blockwise8", values);
    for (let start = 0; start < values.length; start += 4096) {
      const block = values.subarray(start, start + 4096);
      const absmax = Math.max(...block.map(Math.abs));
      const error = maxAbsError(block, decoded.subarray(start, start + 4096));
      expect(error).toBeLessThanOrEqual((absmax / 254) * (1 + 1e-6));
      if (start !== 4096) expect(error).toBeLessThan(20); // the outlier stays in its own block
    }
  });

  it("is symmetric: −x decodes to exactly −decode(x), and no code is −128", () => {
    const values = normal(10_000, 10);
    const bytes = compressorFor("blockwise8", values.length).compress(values);
    expect(bytes.subarray(bytes.length - values.length).includes(0x80)).toBe(false);
    const negated = roundTrip(
      "blockwise8",
      values.map((x) => -x),
    );
    // `+ 0` turns −0 into 0: zero codes decode to +0 whichever the sign of the input.
    expect(negated.map((x) => x + 0)).toEqual(decompress(bytes, values.length).map((x) => 0 - x));
  });

  it("rounds ties away from zero", () => {
    // absmax 127 makes the scale 1, so ±2.5 and ±0.5 are exact ties.
    const values = Float32Array.of(127, -2.5, 2.5, -0.5, 0.5);
    expect(Array.from(roundTrip("blockwise8", values))).toEqual([127, -3, 3, -1, 1]);
  });

  it("encodes zero and constant vectors", () => {
    expect(roundTrip("blockwise8", new Float32Array(5000))).toEqual(new Float32Array(5000));
    const constant = roundTrip("blockwise8", new Float32Array(5000).fill(-0.7));
    expect(maxAbsError(constant, new Float32Array(5000).fill(-0.7))).toBeLessThan(1e-7);
  });
});
