import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { SwarmErrorCode, isSwarmError, type SwarmError } from "../../src/errors.ts";
import { CODEC_NAMES, compressorFor, decompress } from "../../src/compression/index.ts";
import { HEADER_BYTES, WIRE_VERSION } from "../../src/compression/wire.ts";

type Outcome = Float32Array | SwarmError;

/** Fixed seed: the same cases on every run; raise numRuns locally to search harder. */
const RUNS = { seed: 0x5eed, numRuns: 500 };

/** Decodes, and returns the SwarmError instead of throwing it; anything else fails the test. */
function attempt(bytes: Uint8Array, expectedLength: number): Outcome {
  try {
    return decompress(bytes, expectedLength);
  } catch (error) {
    if (
      isSwarmError(error, SwarmErrorCode.MALFORMED_MESSAGE) ||
      isSwarmError(error, SwarmErrorCode.LENGTH_MISMATCH)
    ) {
      return error;
    }
    throw error;
  }
}

function expectRefused(bytes: Uint8Array, expectedLength: number, code: SwarmErrorCode, text: string): void {
  const outcome = attempt(bytes, expectedLength);
  expect(outcome).toBeInstanceOf(Error);
  expect((outcome as SwarmError).code).toBe(code);
  expect((outcome as SwarmError).message).toContain(text);
}

/** A valid encoding: `compress` of `values`, with bytes patched by `edit`. */
function encoded(
  name: (typeof CODEC_NAMES)[number],
  values: number[],
  edit?: (view: DataView) => void,
): Uint8Array {
  const bytes = compressorFor(name, values.length).compress(Float32Array.from(values));
  edit?.(new DataView(bytes.buffer));
  return bytes;
}

const eightBit = ["uniform8", "quantile8", "blockwise8"] as const;
const finiteVector = fc.float32Array({ noNaN: true, noDefaultInfinity: true, maxLength: 600 });
const anyVector = fc.float32Array({ maxLength: 600 });

/** Any codec with an input it accepts (all but none and fp16 refuse non-finite values). */
const validEncoding = fc.oneof(
  fc.tuple(fc.constantFrom("none" as const, "fp16" as const), anyVector),
  fc.tuple(fc.constantFrom(...eightBit, "topk" as const, "sparse" as const), finiteVector),
);

describe("decompress refuses", () => {
  it("input shorter than the header, or with an unknown format byte or codec id", () => {
    expectRefused(new Uint8Array(0), 0, SwarmErrorCode.MALFORMED_MESSAGE, "shorter than");
    expectRefused(encoded("fp16", []).subarray(0, 5), 0, SwarmErrorCode.MALFORMED_MESSAGE, "shorter than");
    const wrongVersion = encoded("fp16", [1]);
    wrongVersion[0] = WIRE_VERSION + 1;
    expectRefused(wrongVersion, 1, SwarmErrorCode.MALFORMED_MESSAGE, "unknown format byte");
    for (const id of [8, 0xff]) {
      const unknown = encoded("fp16", [1]);
      unknown[1] = id;
      expectRefused(unknown, 1, SwarmErrorCode.MALFORMED_MESSAGE, `unknown codec id ${id}`);
    }
  });

  it.each(CODEC_NAMES)("%s with another element count, truncated, or with trailing bytes", (name) => {
    const bytes = encoded(name, [1, -2, 3, 0.5]);
    expect(Array.from(decompress(bytes, 4))).toHaveLength(4);
    expectRefused(bytes, 5, SwarmErrorCode.LENGTH_MISMATCH, "has 4 elements, expected 5");
    expectRefused(bytes, 3, SwarmErrorCode.LENGTH_MISMATCH, "has 4 elements, expected 3");
    expectRefused(bytes.subarray(0, bytes.length - 1), 4, SwarmErrorCode.MALFORMED_MESSAGE, "truncated");
    const longer = new Uint8Array(bytes.length + 1);
    longer.set(bytes);
    expectRefused(longer, 4, SwarmErrorCode.MALFORMED_MESSAGE, "1 trailing bytes");
  });

  it("an expected length that is not an element count", () => {
    for (const length of [-1, 1.5, NaN, 2 ** 32]) {
      expectRefused(encoded("none", []), length, SwarmErrorCode.LENGTH_MISMATCH, "expected length");
    }
  });

  it("uniform8 ranges that are not a finite interval", () => {
    const at = HEADER_BYTES;
    for (const [min, max] of [
      [NaN, 1],
      [0, Infinity],
      [2, 1],
    ] as const) {
      const bytes = encoded("uniform8", [0, 1], (view) => {
        view.setFloat32(at, min, true);
        view.setFloat32(at + 4, max, true);
      });
      expectRefused(bytes, 2, SwarmErrorCode.MALFORMED_MESSAGE, "not a finite interval");
    }
  });

  it("quantile8 codebooks with a non-finite entry", () => {
    for (const bad of [NaN, Infinity, -Infinity]) {
      const bytes = encoded("quantile8", [0, 1], (view) => {
        view.setFloat32(HEADER_BYTES + 4 * 200, bad, true);
      });
      expectRefused(bytes, 2, SwarmErrorCode.MALFORMED_MESSAGE, `codebook entry 200 is ${bad}`);
    }
  });

  it("blockwise8 with a zero block size, a bad scale or the code -128", () => {
    const values = Array.from({ length: 5000 }, (_, i) => Math.sin(i));
    const zeroBlock = encoded("blockwise8", values, (view) => {
      view.setUint32(HEADER_BYTES, 0, true);
    });
    expectRefused(zeroBlock, 5000, SwarmErrorCode.MALFORMED_MESSAGE, "block size is 0");
    for (const scale of [NaN, Infinity, -1]) {
      const bytes = encoded("blockwise8", values, (view) => {
        view.setFloat32(HEADER_BYTES + 8, scale, true);
      });
      expectRefused(bytes, 5000, SwarmErrorCode.MALFORMED_MESSAGE, `block 1 has scale ${scale}`);
    }
    const minus128 = encoded("blockwise8", values, (view) => {
      view.setInt8(view.byteLength - 1, -128);
    });
    expectRefused(minus128, 5000, SwarmErrorCode.MALFORMED_MESSAGE, "code -128 at index 4999");
    // A different (valid) block size is honoured: one block of 5000 needs one scale, not two.
    const one = compressorFor("blockwise8", 5000).compress(Float32Array.from(values));
    const reshaped = new Uint8Array(one.length - 4);
    reshaped.set(one.subarray(0, HEADER_BYTES + 8));
    reshaped.set(one.subarray(HEADER_BYTES + 12), HEADER_BYTES + 8);
    new DataView(reshaped.buffer).setUint32(HEADER_BYTES, 5000, true);
    expect(decompress(reshaped, 5000)).toHaveLength(5000);
  });
});

describe("decompress on hostile bytes (properties)", () => {
  it("returns the expected length or refuses, for random bytes", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 300 }), fc.nat(400), (bytes, expectedLength) => {
        const outcome = attempt(bytes, expectedLength);
        if (outcome instanceof Float32Array) expect(outcome).toHaveLength(expectedLength);
      }),
      RUNS,
    );
  });

  it("returns the expected length or refuses, for random bodies behind a plausible header", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 6 }),
        fc.nat(300),
        fc.uint8Array({ maxLength: 1400 }),
        (id, count, body) => {
          const bytes = new Uint8Array(HEADER_BYTES + body.length);
          bytes[0] = WIRE_VERSION;
          bytes[1] = id;
          new DataView(bytes.buffer).setUint32(2, count, true);
          bytes.set(body, HEADER_BYTES);
          const outcome = attempt(bytes, count);
          if (outcome instanceof Float32Array) expect(outcome).toHaveLength(count);
        },
      ),
      RUNS,
    );
  });

  it("decodes random parameters and payloads of the right size to finite values, or refuses", () => {
    const bodySize = (id: number, count: number, blockSize: number): number =>
      [4 * count, 2 * count, 8 + count, 1024 + count, 4 + 4 * Math.ceil(count / blockSize) + count][id] ?? 0;
    fc.assert(
      fc.property(
        fc.integer({ min: 2, max: 4 }),
        fc.nat(300),
        fc.integer({ min: 1, max: 400 }),
        fc.infiniteStream(fc.nat(255)),
        (id, count, blockSize, stream) => {
          const body = Uint8Array.from(stream.take(bodySize(id, count, blockSize)));
          if (id === 4) new DataView(body.buffer).setUint32(0, blockSize, true);
          const bytes = new Uint8Array(HEADER_BYTES + body.length);
          bytes.set([WIRE_VERSION, id]);
          new DataView(bytes.buffer).setUint32(2, count, true);
          bytes.set(body, HEADER_BYTES);
          const outcome = attempt(bytes, count);
          if (outcome instanceof Float32Array) {
            expect(outcome).toHaveLength(count);
            expect(outcome.every(Number.isFinite)).toBe(true);
          }
        },
      ),
      RUNS,
    );
  });

  it("refuses every truncation and every extension of a valid encoding", () => {
    fc.assert(
      fc.property(
        validEncoding,
        fc.nat(),
        fc.uint8Array({ minLength: 1, maxLength: 8 }),
        ([name, values], cut, extra) => {
          const bytes = compressorFor(name, values.length).compress(values);
          expect(decompress(bytes, values.length)).toHaveLength(values.length);
          const truncated = bytes.subarray(0, cut % bytes.length);
          expect(attempt(truncated, values.length)).toMatchObject({ code: SwarmErrorCode.MALFORMED_MESSAGE });
          const extended = new Uint8Array(bytes.length + extra.length);
          extended.set(bytes);
          extended.set(extra, bytes.length);
          expect(attempt(extended, values.length)).toMatchObject({ code: SwarmErrorCode.MALFORMED_MESSAGE });
        },
      ),
      RUNS,
    );
  });

  it("after any bit flip, refuses or decodes the right length (finite for 8-bit codecs)", () => {
    fc.assert(
      fc.property(validEncoding, fc.nat(), fc.nat(7), ([name, values], at, bit) => {
        const bytes = compressorFor(name, values.length).compress(values);
        bytes[at % bytes.length] = (bytes[at % bytes.length] ?? 0) ^ (1 << bit);
        const outcome = attempt(bytes, values.length);
        if (outcome instanceof Float32Array) {
          expect(outcome).toHaveLength(values.length);
          if (name !== "none" && name !== "fp16") expect(outcome.every(Number.isFinite)).toBe(true);
        }
      }),
      RUNS,
    );
  });
});
