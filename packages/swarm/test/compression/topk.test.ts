import { describe, expect, it } from "vitest";
import { maxChunkPayloadBytes } from "../../src/averaging/allreduce-messages.ts";
import { chunkElementsFor } from "../../src/averaging/partition.ts";
import {
  CODEC_NAMES,
  compressorFor,
  compressWithFeedback,
  decompress,
  DEFAULT_TOPK_DENSITY,
  encodeTopkMean,
  resultCompressorFor,
  topkMeanBytes,
} from "../../src/compression/index.ts";
import { weightedMean } from "../../src/averaging/aggregation/weighted-mean.ts";
import { INDEX_BITMAP, INDEX_LIST, INDEX_RICE } from "../../src/compression/block-index.ts";
import { keptCount, TOPK_BLOCK_SIZE, topkCodec } from "../../src/compression/topk.ts";
import { HEADER_BYTES } from "../../src/compression/wire.ts";
import { SwarmErrorCode, isSwarmError } from "../../src/errors.ts";
import { seededRandom } from "../support/seeded-random.ts";

/** Values in ±[0.001, 1) with random signs: no zeros, and (almost surely) no ties. */
function noZeros(n: number, seed: number): Float32Array {
  const next = seededRandom(seed);
  return Float32Array.from({ length: n }, () => (next() < 0.5 ? -1 : 1) * (0.001 + 0.999 * next()));
}

/** A vector with about `density` of its elements nonzero, magnitudes spread over 2^-20 … 2^10. */
function sparseVector(n: number, density: number, seed: number): Float32Array {
  const next = seededRandom(seed);
  return Float32Array.from({ length: n }, () =>
    next() < density ? (next() < 0.5 ? -1 : 1) * 2 ** (-20 + 30 * next()) : 0,
  );
}

function codeOf(run: () => unknown): string | undefined {
  try {
    run();
  } catch (error) {
    return isSwarmError(error) ? `${error.code}: ${error.message}` : `not a SwarmError: ${String(error)}`;
  }
  return undefined;
}

function expectRefused(bytes: Uint8Array, length: number, text: string): void {
  expect(codeOf(() => decompress(bytes, length))).toMatch(
    new RegExp(`^${SwarmErrorCode.MALFORMED_MESSAGE}: .*${text}`),
  );
}

function nonzeroOffsets(values: Float32Array, start = 0, end = values.length): number[] {
  const offsets: number[] = [];
  for (let i = start; i < end; i++) if ((values[i] ?? 0) !== 0) offsets.push(i - start);
  return offsets;
}

/** Offsets of the k largest magnitudes of `values[start … end)`, ties to the lower index, increasing. */
function topOffsets(values: Float32Array, start: number, end: number, k: number): number[] {
  return Array.from({ length: end - start }, (_, offset) => offset)
    .sort((a, b) => Math.abs(values[start + b] ?? 0) - Math.abs(values[start + a] ?? 0) || a - b)
    .slice(0, k)
    .sort((a, b) => a - b);
}

/** Rice bits of the gaps between `offsets` (increasing) with parameter r, counted here from the format. */
function riceBits(offsets: readonly number[], r: number): number {
  let bits = 0;
  let previous = -1;
  for (const offset of offsets) {
    bits += ((offset - previous - 1) >> r) + 1 + r;
    previous = offset;
  }
  return bits;
}

/** The index the format says an encoder writes for `offsets` in a block of `length`, and its bytes with the 3-byte header. */
function expectedIndex(length: number, offsets: readonly number[]): { kind: number; bytes: number } {
  const list = 2 * offsets.length;
  const bitmap = Math.ceil(length / 8);
  let best = list <= bitmap ? { kind: INDEX_LIST, bytes: list } : { kind: INDEX_BITMAP, bytes: bitmap };
  for (let r = 0; r <= 15; r++) {
    const bytes = 3 + Math.ceil(riceBits(offsets, r) / 8);
    if (bytes < best.bytes) best = { kind: INDEX_RICE, bytes };
  }
  return { kind: best.kind, bytes: 3 + best.bytes };
}

/** The exact topk size of `values` at `density`: per block its index, levels and 2-bit codes. */
function expectedTopkBytes(values: Float32Array, density: number): number {
  let bytes = HEADER_BYTES + 4;
  for (let start = 0; start < values.length; start += TOPK_BLOCK_SIZE) {
    const end = Math.min(values.length, start + TOPK_BLOCK_SIZE);
    const kept = topOffsets(values, start, end, keptCount(end - start, density));
    bytes += expectedIndex(end - start, kept).bytes + 8 + Math.ceil(kept.length / 4);
  }
  return bytes;
}

const f16round = (Math as unknown as { f16round: (x: number) => number }).f16round;

describe("topk", () => {
  it("keeps the k largest magnitudes of each block with their signs, at two levels per block", () => {
    const n = 3 * TOPK_BLOCK_SIZE + 1000;
    const values = noZeros(n, 1);
    const decoded = decompress(topkCodec(0.015).compress(values), n);
    for (let start = 0; start < n; start += TOPK_BLOCK_SIZE) {
      const end = Math.min(n, start + TOPK_BLOCK_SIZE);
      const kept = topOffsets(values, start, end, keptCount(end - start, 0.015));
      expect(nonzeroOffsets(decoded, start, end)).toEqual(kept);
      const levels = new Set(kept.map((offset) => Math.abs(decoded[start + offset] ?? 0)));
      expect(levels.size).toBe(2);
      const [low = 0, high = 0] = [...levels].sort((a, b) => a - b);
      // Each level is the mean magnitude of the kept values it stands for, and splits them by size.
      for (const level of [low, high]) {
        const group = kept.filter((offset) => Math.abs(decoded[start + offset] ?? 0) === level);
        const mean =
          group.reduce((sum, offset) => sum + Math.abs(values[start + offset] ?? 0), 0) / group.length;
        expect(level).toBeCloseTo(mean, 6);
      }
      const lowMax = Math.max(
        ...kept
          .filter((o) => Math.abs(decoded[start + o] ?? 0) === low)
          .map((o) => Math.abs(values[start + o] ?? 0)),
      );
      const highMin = Math.min(
        ...kept
          .filter((o) => Math.abs(decoded[start + o] ?? 0) === high)
          .map((o) => Math.abs(values[start + o] ?? 0)),
      );
      expect(lowMax).toBeLessThan(highMin);
      for (const offset of kept)
        expect(Math.sign(decoded[start + offset] ?? 0)).toBe(Math.sign(values[start + offset] ?? 0));
    }
  });

  it("has the exact size its parameters and positions imply: 92 bytes per full block at 1.5 %", () => {
    const codec = topkCodec(0.015);
    expect(keptCount(TOPK_BLOCK_SIZE, 0.015)).toBe(62);
    // Full block, positions spread evenly (gaps of 65): 3 (index kind, k) + 8 (levels) + 65 (Rice
    // parameter 5, stream length, 62 × 8 bits) + 16 (62 2-bit codes): 178× smaller than float32.
    expect(codec.bitsPerElement).toBe((92 * 8) / TOPK_BLOCK_SIZE);
    const spread = Float32Array.from({ length: TOPK_BLOCK_SIZE }, (_, i) =>
      i % 66 === 0 && i < 62 * 66 ? 2 + i : 1,
    );
    const spreadBytes = codec.compress(spread);
    expect(spreadBytes.length).toBe(HEADER_BYTES + 4 + 92);
    expect(spreadBytes[HEADER_BYTES + 4]).toBe(INDEX_RICE);
    expect(nonzeroOffsets(decompress(spreadBytes, TOPK_BLOCK_SIZE))).toEqual(
      Array.from({ length: 62 }, (_, j) => 66 * j),
    );
    // Random positions: each block's smallest index as the format counts it. The last block of
    // 100 keeps 2: a 4-byte list (the bitmap would take 13, Rice at least 6), one code byte.
    const n = 3 * TOPK_BLOCK_SIZE + 100;
    const values = noZeros(n, 2);
    const bytes = codec.compress(values);
    expect(bytes.length).toBe(expectedTopkBytes(values, 0.015));
    expect(bytes.length - (HEADER_BYTES + 4 + 3 * 92)).toBeLessThan(3 + 8 + 4 + 1 + 3 * 8);
    expect(bytes[bytes.length - (3 + 8 + 4 + 1)]).toBe(INDEX_LIST);
    // One element: k = 1, a 1-byte bitmap beats a 2-byte list.
    expect(codec.compress(Float32Array.of(-3)).length).toBe(HEADER_BYTES + 4 + 3 + 8 + 1 + 1);
    expect(decompress(codec.compress(Float32Array.of(-3)), 1)).toEqual(Float32Array.of(-3));
  });

  it("honours the density, and writes the smallest of a list, a bitmap and a Rice code", () => {
    const n = 2 * TOPK_BLOCK_SIZE + 777;
    const values = noZeros(n, 3);
    const kinds = new Set<number>();
    for (const density of [1e-4, 0.001, 0.015, 0.0625, 0.1, 0.5, 1]) {
      const compressor = compressorFor("topk", n, undefined, density);
      const bytes = compressor.compress(values);
      expect(bytes.length).toBe(expectedTopkBytes(values, density));
      const decoded = decompress(bytes, n);
      for (let start = 0; start < n; start += TOPK_BLOCK_SIZE) {
        const length = Math.min(n, start + TOPK_BLOCK_SIZE) - start;
        const k = Math.max(1, Math.ceil(density * length));
        expect(nonzeroOffsets(decoded, start, start + length)).toHaveLength(k);
      }
      const first = topOffsets(values, 0, TOPK_BLOCK_SIZE, keptCount(TOPK_BLOCK_SIZE, density));
      const kind = expectedIndex(TOPK_BLOCK_SIZE, first).kind;
      expect(bytes[HEADER_BYTES + 4]).toBe(kind);
      kinds.add(kind);
    }
    expect([...kinds].sort()).toEqual([INDEX_LIST, INDEX_BITMAP, INDEX_RICE]);
    // Density 1 keeps every element: a sign and one of two levels each.
    const all = decompress(compressorFor("topk", n, undefined, 1).compress(values), n);
    expect(nonzeroOffsets(all)).toHaveLength(n);
  });

  it("breaks ties by the lower index, deterministically", () => {
    const n = TOPK_BLOCK_SIZE + 500;
    const values = Float32Array.from({ length: n }, (_, i) => (i % 3 === 0 ? -1 : 1));
    const codec = topkCodec(0.01);
    const bytes = codec.compress(values);
    expect(codec.compress(values.slice())).toEqual(bytes);
    const decoded = decompress(bytes, n);
    expect(nonzeroOffsets(decoded, 0, TOPK_BLOCK_SIZE)).toEqual(Array.from({ length: 41 }, (_, i) => i));
    expect(nonzeroOffsets(decoded, TOPK_BLOCK_SIZE, n)).toEqual([0, 1, 2, 3, 4]);
    expect(Array.from(decoded.subarray(0, 4))).toEqual([-1, 1, 1, -1]);
    // Zeros are kept like any magnitude when a block has fewer nonzeros than k.
    const mostlyZero = new Float32Array(1000);
    mostlyZero[700] = -2;
    const sparse = decompress(topkCodec(0.01).compress(mostlyZero), 1000);
    expect(sparse[700]).toBe(-2);
    expect(nonzeroOffsets(sparse)).toEqual([700]);
    expect(decompress(topkCodec(0.5).compress(new Float32Array(64)), 64)).toEqual(new Float32Array(64));
  });

  it("refuses NaN and ±Infinity, and a density outside (0, 1]", () => {
    for (const name of ["topk", "sparse"] as const) {
      for (const bad of [NaN, Infinity, -Infinity]) {
        const values = noZeros(5000, 4);
        values[4500] = bad;
        expect(codeOf(() => compressorFor(name, values.length).compress(values))).toMatch(
          /^MALFORMED_MESSAGE: .*index 4500/,
        );
      }
    }
    for (const density of [0, -0.1, 1.5, NaN]) {
      expect(codeOf(() => compressorFor("topk", 10, undefined, density))).toMatch(
        /^MALFORMED_MESSAGE: .*density/,
      );
    }
    expect(compressorFor("topk", 10).bitsPerElement).toBe(topkCodec(DEFAULT_TOPK_DENSITY).bitsPerElement);
    expect(DEFAULT_TOPK_DENSITY).toBe(0.015);
  });

  it("refuses malformed parameters, indices, levels and codes", () => {
    const values = noZeros(5000, 5);
    const valid = topkCodec(0.015).compress(values);
    const block0 = HEADER_BYTES + 4;
    const levels0 = block0 + 3;
    const index0 = levels0 + 8;
    expect(valid[block0]).toBe(INDEX_RICE);
    const codes0 = index0 + 3 + new DataView(valid.buffer).getUint16(index0 + 1, true);
    const patched = (edit: (view: DataView, bytes: Uint8Array) => void): Uint8Array => {
      const bytes = valid.slice();
      edit(new DataView(bytes.buffer), bytes);
      return bytes;
    };
    expect(decompress(valid, 5000)).toHaveLength(5000);
    expectRefused(valid.subarray(0, valid.length - 1), 5000, "truncated");
    expectRefused(
      patched((view) => {
        view.setUint32(HEADER_BYTES, 0, true);
      }),
      5000,
      "block size 0",
    );
    expectRefused(
      patched((view) => {
        view.setUint32(HEADER_BYTES, 70_000, true);
      }),
      5000,
      "block size 70000",
    );
    // A block size that leaves no room for the blocks it implies.
    expectRefused(
      patched((view) => {
        view.setUint32(HEADER_BYTES, 1, true);
      }),
      5000,
      "cannot hold 5000 blocks",
    );
    expectRefused(
      patched((view) => {
        view.setUint8(block0, 3);
      }),
      5000,
      "unknown index kind 3",
    );
    expectRefused(
      patched((view) => {
        view.setUint16(block0 + 1, 0, true);
      }),
      5000,
      "sends 0 of its 4096",
    );
    expectRefused(
      patched((view) => {
        view.setUint16(block0 + 1, 4097, true);
      }),
      5000,
      "sends 4097 of its 4096",
    );
    for (const [low, high] of [
      [NaN, 1],
      [-1, 1],
      [2, 1],
      [0, Infinity],
    ] as const) {
      const bytes = patched((view) => {
        view.setFloat32(levels0, low, true);
        view.setFloat32(levels0 + 4, high, true);
      });
      expectRefused(bytes, 5000, "block 0 has levels");
    }
    // 62 codes fill 15.5 bytes: the last byte's high nibble is unused and must be zero.
    expectRefused(
      patched((_, bytes) => (bytes[codes0 + 15] = (bytes[codes0 + 15] ?? 0) | 0x40)),
      5000,
      "unused code bits",
    );
    // The list must increase and stay inside the block (k = 3 of 4,096: a list is smallest).
    const listed = topkCodec(0.0005).compress(values);
    expect(listed[block0]).toBe(INDEX_LIST);
    const editList = (edit: (view: DataView) => void): Uint8Array => {
      const bytes = listed.slice();
      edit(new DataView(bytes.buffer));
      return bytes;
    };
    const first = new DataView(listed.buffer).getUint16(index0, true);
    expectRefused(
      editList((view) => {
        view.setUint16(index0 + 2, first, true);
      }),
      5000,
      "lists offset",
    );
    expectRefused(
      editList((view) => {
        view.setUint16(index0 + 4, 4096, true);
      }),
      5000,
      "lists offset 4096",
    );
  });

  it("refuses Rice indexes that end early, run past the block or carry anything after their offsets", () => {
    // One block of 4,096 elements keeping 62, positions spread: gaps of 65, Rice parameter 5, 8 bits each.
    const values = Float32Array.from({ length: TOPK_BLOCK_SIZE }, (_, i) =>
      i % 66 === 0 && i < 62 * 66 ? 2 + i : 1,
    );
    const valid = topkCodec(0.015).compress(values);
    const index = HEADER_BYTES + 4 + 3 + 8;
    const stream = index + 3;
    expect(valid[HEADER_BYTES + 4]).toBe(INDEX_RICE);
    expect(valid[index]).toBe(5);
    expect(new DataView(valid.buffer).getUint16(index + 1, true)).toBe(62);
    const edited = (edit: (view: DataView, bytes: Uint8Array) => void, extra = 0): Uint8Array => {
      const bytes = new Uint8Array(valid.length + extra);
      bytes.set(valid.subarray(0, stream + 62));
      bytes.set(valid.subarray(stream + 62), stream + 62 + extra);
      edit(new DataView(bytes.buffer), bytes);
      return bytes;
    };
    expect(
      decompress(
        edited(() => undefined),
        TOPK_BLOCK_SIZE,
      ),
    ).toEqual(decompress(valid, TOPK_BLOCK_SIZE));
    expectRefused(
      edited((view) => {
        view.setUint8(index, 16);
      }),
      TOPK_BLOCK_SIZE,
      "Rice parameter 16",
    );
    // A stream one byte short loses the last offset's bits.
    expectRefused(
      edited((view) => {
        view.setUint16(index + 1, 61, true);
      }),
      TOPK_BLOCK_SIZE,
      "ends before its 62 offsets",
    );
    // A zero byte after the offsets is not the fewest bytes.
    expectRefused(
      edited((view) => {
        view.setUint16(index + 1, 63, true);
      }, 1),
      TOPK_BLOCK_SIZE,
      "1 bytes after its offsets",
    );
    // Parameter 15: the first gap (0) reads 15 bits, and the bits that follow stop being a valid code.
    expectRefused(
      edited((view) => {
        view.setUint8(index, 15);
      }),
      TOPK_BLOCK_SIZE,
      "Rice index",
    );
    // Every bit set: a unary run that leaves the block.
    expectRefused(
      edited((_, bytes) => bytes.fill(0xff, stream, stream + 62)),
      TOPK_BLOCK_SIZE,
      "past its end",
    );
    // Bits after the last offset: a set bit in a byte appended to the stream.
    expectRefused(
      edited((view, bytes) => {
        view.setUint16(index + 1, 63, true);
        bytes[stream + 62] = 0x80;
      }, 1),
      TOPK_BLOCK_SIZE,
      "after its offsets",
    );
    expectRefused(valid.subarray(0, stream + 10), TOPK_BLOCK_SIZE, "truncated");
  });

  it("refuses bitmaps with another number of bits or bits past the block", () => {
    const values = noZeros(1000, 6);
    const valid = topkCodec(0.5).compress(values); // one block of 1000, k = 500: a bitmap of 125 bytes
    const index = HEADER_BYTES + 4 + 3 + 8;
    expect(valid[HEADER_BYTES + 4]).toBe(INDEX_BITMAP);
    const withBit = (at: number, bit: number): Uint8Array => {
      const bytes = valid.slice();
      bytes[at] = (bytes[at] ?? 0) ^ (1 << bit);
      return bytes;
    };
    const setAt = [...Array(8).keys()].find((bit) => (((valid[index] ?? 0) >> bit) & 1) === 1) ?? 0;
    expectRefused(withBit(index, setAt), 1000, "bitmap sets 499 bits, not 500");
    const clearAt = [...Array(8).keys()].find((bit) => (((valid[index] ?? 0) >> bit) & 1) === 0) ?? 0;
    expectRefused(withBit(index, clearAt), 1000, "bitmap sets more than 500 bits");
    // 1000 elements fill exactly 125 bytes; a 999-element vector leaves bit 7 of the last byte over.
    const short = topkCodec(0.5).compress(values.subarray(0, 999));
    short[index + 124] = (short[index + 124] ?? 0) | 0x80;
    expectRefused(short, 999, "bit 999 past its end");
  });
});

describe("sparse", () => {
  it("keeps every nonzero at its fp16 value, and nothing else", () => {
    for (const density of [0, 0.01, 0.05, 0.3, 1]) {
      const n = 2 * 4096 + 123;
      const values = sparseVector(n, density, Math.round(density * 100) + 7);
      const decoded = decompress(compressorFor("sparse", n).compress(values), n);
      expect(nonzeroOffsets(decoded)).toEqual(nonzeroOffsets(values));
      for (let i = 0; i < n; i++) expect(decoded[i]).toBe(f16round(values[i] ?? 0) || 0);
    }
    // What fp16 rounds to zero is dropped; finite values beyond ±65504 saturate.
    const edge = Float32Array.of(2 ** -26, -(2 ** -24), 1e6, -1e6, -0, 0);
    expect(Array.from(decompress(compressorFor("sparse", 6).compress(edge), 6))).toEqual([
      0,
      -(2 ** -24),
      65504,
      -65504,
      0,
      0,
    ]);
  });

  it("takes the smallest index and 2 bytes per nonzero: under 3 bytes each at 6 %, a bitmap when dense", () => {
    const size = (values: Float32Array) => compressorFor("sparse", values.length).compress(values).length;
    const block = (every: number, count = 4096): Float32Array =>
      Float32Array.from({ length: 4096 }, (_, i) => (i % every === 0 && i / every < count ? 1 + i : 0));
    expect(size(new Float32Array(4096))).toBe(HEADER_BYTES + 4 + 3);
    for (const values of [
      block(16),
      block(1, 256),
      block(7),
      block(2),
      block(1),
      sparseVector(4096, 0.06, 9),
    ]) {
      const offsets = nonzeroOffsets(values);
      expect(size(values)).toBe(HEADER_BYTES + 4 + expectedIndex(4096, offsets).bytes + 2 * offsets.length);
    }
    // About 6 % of a block nonzero, as the union of four 1.5 % contributions: under 3 bytes per
    // nonzero (a list would take 4).
    const union = sparseVector(4096, 0.06, 9);
    expect(size(union) - HEADER_BYTES - 4).toBeLessThan(3 * nonzeroOffsets(union).length);
    expect(size(block(1))).toBe(HEADER_BYTES + 4 + 3 + 512 + 4096 * 2);
    expect(compressorFor("sparse", 4096).estimateRatio(4096) * 4 * 4096).toBe(size(block(1)));
  });

  it("refuses listed zeros, non-finite values and counts past the block", () => {
    const values = Float32Array.of(
      0,
      1.5,
      0,
      -2,
      0,
      0,
      0,
      0,
      0,
      0,
      0,
      0,
      0,
      0,
      0,
      0,
      0,
      0,
      0,
      0,
      0,
      0,
      0,
      0,
      0,
      0,
      0,
      0,
      0,
      0,
      0,
      7,
    );
    const valid = compressorFor("sparse", values.length).compress(values);
    expect(decompress(valid, values.length)).toEqual(values);
    const block0 = HEADER_BYTES + 4;
    expect(valid[block0]).toBe(INDEX_BITMAP); // 3 nonzeros: a 4-byte bitmap beats a 6-byte list
    const valuesAt = block0 + 3 + 4;
    for (const [half, text] of [
      [0x0000, "value 0x0,"],
      [0x8000, "value 0x8000"],
      [0x7c00, "value 0x7c00"],
      [0xfe00, "value 0xfe00"],
    ] as const) {
      const bytes = valid.slice();
      new DataView(bytes.buffer).setUint16(valuesAt + 2, half, true);
      expectRefused(bytes, values.length, text);
    }
    const tooMany = valid.slice();
    new DataView(tooMany.buffer).setUint16(block0 + 1, 33, true);
    expectRefused(tooMany, values.length, "sends 33 of its 32");
    expectRefused(valid.subarray(0, valid.length - 1), values.length, "truncated");
  });
});

describe("resultCompressorFor", () => {
  it("sends a topk round's results in sparse and every other round's in its own codec", () => {
    expect(resultCompressorFor(compressorFor("topk", 10, undefined, 0.2)).name).toBe("sparse");
    for (const name of CODEC_NAMES.filter((codec) => codec !== "topk")) {
      const compressor = compressorFor(name, 10);
      expect(resultCompressorFor(compressor)).toBe(compressor);
    }
  });

  it("the mean of four topk contributions at 1.5 % stays sparse: about 1.9 bits per element", () => {
    const n = 16 * TOPK_BLOCK_SIZE;
    const topk = compressorFor("topk", n);
    const sum = new Float64Array(n);
    for (let member = 0; member < 4; member++) {
      const sent = decompress(topk.compress(noZeros(n, 20 + member)), n);
      for (let i = 0; i < n; i++) sum[i] = (sum[i] ?? 0) + (sent[i] ?? 0);
    }
    const mean = Float32Array.from(sum, (x) => x / 4);
    const bytes = resultCompressorFor(topk).compress(mean);
    const decoded = decompress(bytes, n);
    expect(nonzeroOffsets(decoded)).toEqual(nonzeroOffsets(mean));
    expect(nonzeroOffsets(mean).length).toBeLessThanOrEqual(4 * 62 * 16);
    // At most 4 · 62 nonzeros per block, under the 256 where the bitmap pays: 4 bytes each.
    expect((8 * bytes.length) / n).toBeLessThan((8 * (3 + 4 * 62 * 4)) / TOPK_BLOCK_SIZE + 0.01);
  });
});

describe("compressWithFeedback", () => {
  it("loses nothing over rounds: Σ sent + the last residual = Σ inputs", () => {
    const n = 10_000;
    const codec = compressorFor("topk", n);
    const residual = new Float32Array(n);
    const inputs = new Float64Array(n);
    const sent = new Float64Array(n);
    const next = seededRandom(9);
    for (let round = 0; round < 20; round++) {
      const gradient = Float32Array.from({ length: n }, () => next() * 2 - 1);
      const input = Float32Array.from(gradient, (x, i) => x + (residual[i] ?? 0));
      const { bytes, sent: decoded } = compressWithFeedback(codec, input, residual);
      expect(decompress(bytes, n)).toEqual(decoded);
      for (let i = 0; i < n; i++) {
        inputs[i] = (inputs[i] ?? 0) + (gradient[i] ?? 0);
        sent[i] = (sent[i] ?? 0) + (decoded[i] ?? 0);
      }
    }
    let worst = 0;
    let largest = 0;
    for (let i = 0; i < n; i++) {
      worst = Math.max(worst, Math.abs((sent[i] ?? 0) + (residual[i] ?? 0) - (inputs[i] ?? 0)));
      largest = Math.max(largest, Math.abs(residual[i] ?? 0));
    }
    // Each round rounds the input and the residual to float32 once (|x| < 20: ulp ≤ 2^-19).
    expect(worst).toBeLessThan(40 * 2 ** -19);
    expect(largest).toBeGreaterThan(1); // most of the mass is still waiting in the residual
  });

  it("gives a zero residual with a lossless codec, and refuses a residual of another length", () => {
    const values = noZeros(100, 10);
    const residual = new Float32Array(100).fill(5);
    const { sent } = compressWithFeedback(compressorFor("none", 100), values, residual);
    expect(sent).toEqual(values);
    expect(residual).toEqual(new Float32Array(100));
    expect(
      codeOf(() => compressWithFeedback(compressorFor("topk", 100), values, new Float32Array(99))),
    ).toMatch(/^LENGTH_MISMATCH: residual has 99 elements, the values 100/);
  });
});

describe("chunk sizes", () => {
  it("every codec encodes n elements in at most maxChunkPayloadBytes(n)", () => {
    for (const name of CODEC_NAMES) {
      for (const n of [1, 2, 7, 100, 4095, 4097, 70_000]) {
        const values = noZeros(n, n);
        for (const density of name === "topk" ? [1e-4, 0.015, 1] : [undefined]) {
          const bytes = compressorFor(name, n, undefined, density).compress(values);
          expect(bytes.length, `${name} ${density} ${n}`).toBeLessThanOrEqual(maxChunkPayloadBytes(n));
        }
      }
    }
  });

  it("an 8 KiB topk chunk encodes to about 8 KiB", () => {
    const topk = compressorFor("topk", 1 << 20);
    const elements = chunkElementsFor(8 << 10, topk);
    expect(elements).toBe(Math.floor((8 << 13) / topk.bitsPerElement));
    const bytes = topk.compress(noZeros(elements, 11)).length;
    // The estimate takes the positions as spread evenly; random ones code a little shorter.
    expect(bytes).toBeGreaterThan(7700);
    expect(bytes).toBeLessThan(8 * 1024 + 200);
  });
});

describe("topk-mean", () => {
  const n = TOPK_BLOCK_SIZE + 900;
  const contributions = [noZeros(n, 21), noZeros(n, 22), noZeros(n, 23)].map((values) =>
    topkCodec(0.015).compress(values),
  );
  const weights = [32, 7.5, 64];
  const entries = contributions.map((bytes, i) => ({ bytes, weight: weights[i] ?? 0 }));

  it("decodes to the weighted mean of its contributions, as the reducer's mean has it, bit for bit", () => {
    const bytes = encodeTopkMean(entries, n);
    expect(bytes.length).toBe(topkMeanBytes(entries));
    expect(bytes[1]).toBe(7);
    const decoded = contributions.map((contribution) => decompress(contribution, n));
    expect(decompress(bytes, n)).toEqual(weightedMean.aggregate(decoded, weights));
    // Smaller than the same mean in sparse once the contributions are this sparse.
    const sparse = compressorFor("sparse", n).compress(weightedMean.aggregate(decoded, weights));
    expect(bytes.length).toBeLessThan(0.7 * sparse.length);
  });

  it("refuses no entries, bad weights, entries in another codec or length, and truncated or trailing bytes", () => {
    const valid = encodeTopkMean(entries, n);
    const edited = (edit: (view: DataView) => void): Uint8Array => {
      const bytes = valid.slice();
      edit(new DataView(bytes.buffer));
      return bytes;
    };
    expect(codeOf(() => encodeTopkMean([], n))).toMatch(/^MALFORMED_MESSAGE: .*not 0/);
    expectRefused(
      edited((view) => {
        view.setUint16(HEADER_BYTES, 0, true);
      }),
      n,
      "no entry",
    );
    for (const weight of [0, -1, Number.NaN, Infinity]) {
      expectRefused(
        edited((view) => {
          view.setFloat64(HEADER_BYTES + 2, weight, true);
        }),
        n,
        `entry 0 has weight ${weight}`,
      );
    }
    const fp16Entry = compressorFor("fp16", n).compress(noZeros(n, 24));
    expectRefused(encodeTopkMean([...entries, { bytes: fp16Entry, weight: 1 }], n), n, "unknown codec id 1");
    const nested = encodeTopkMean([...entries, { bytes: valid, weight: 1 }], n);
    expectRefused(nested, n, "unknown codec id 7");
    const shorter = topkCodec(0.015).compress(noZeros(n - 1, 25));
    expect(codeOf(() => decompress(encodeTopkMean([{ bytes: shorter, weight: 1 }], n), n))).toMatch(
      /^LENGTH_MISMATCH: /,
    );
    expectRefused(valid.subarray(0, valid.length - 1), n, "truncated");
    expectRefused(Uint8Array.of(...valid, 0), n, "trailing");
  });
});
