import { describe, expect, it } from "vitest";
import { SwarmErrorCode } from "../../src/errors.ts";
import { GradientAccumulator } from "../../src/optim/gradient-accumulator.ts";

const f32 = (values: number[]) => Float32Array.from(values);

describe("GradientAccumulator", () => {
  it("returns the sample-weighted mean of minibatch means", () => {
    const accumulator = new GradientAccumulator(3);
    accumulator.add(f32([1, 2, -4]), 1);
    accumulator.add(f32([4, 0, 2]), 3);
    expect(accumulator.samples).toBe(4);
    expect(accumulator.minibatches).toBe(2);
    // (1·1 + 4·3)/4, (2·1 + 0·3)/4, (−4·1 + 2·3)/4
    expect(accumulator.mean()).toEqual(f32([3.25, 0.5, 0.5]));
  });

  it("gives zeros when empty, and after reset", () => {
    const accumulator = new GradientAccumulator(2);
    expect(accumulator.mean()).toEqual(f32([0, 0]));
    accumulator.add(f32([1, 1]), 2);
    accumulator.reset();
    expect(accumulator.samples).toBe(0);
    expect(accumulator.minibatches).toBe(0);
    expect(accumulator.mean()).toEqual(f32([0, 0]));
  });

  it("returns a fresh array that later adds do not change", () => {
    const accumulator = new GradientAccumulator(1);
    accumulator.add(f32([2]), 1);
    const mean = accumulator.mean();
    accumulator.add(f32([4]), 1);
    expect(mean).toEqual(f32([2]));
  });

  it("absorbs another accumulator and empties it", () => {
    const a = new GradientAccumulator(2);
    const b = new GradientAccumulator(2);
    a.add(f32([1, 0]), 2);
    b.add(f32([0, 3]), 2);
    a.absorb(b);
    expect(a.samples).toBe(4);
    expect(a.minibatches).toBe(2);
    expect(a.mean()).toEqual(f32([0.5, 1.5]));
    expect(b.samples).toBe(0);
    expect(b.mean()).toEqual(f32([0, 0]));
    expect(() => {
      a.absorb(new GradientAccumulator(3));
    }).toThrow(expect.objectContaining({ code: SwarmErrorCode.LENGTH_MISMATCH }));
  });

  it.each([
    [
      "a wrong length",
      f32([1, 2, 3]),
      1,
      SwarmErrorCode.LENGTH_MISMATCH,
      /3 elements, the accumulator holds 2/,
    ],
    ["NaN", f32([1, Number.NaN]), 1, SwarmErrorCode.MALFORMED_MESSAGE, /element 1 is NaN/],
    [
      "Infinity",
      f32([Number.NEGATIVE_INFINITY, 0]),
      1,
      SwarmErrorCode.MALFORMED_MESSAGE,
      /element 0 is -Infinity/,
    ],
    ["zero samples", f32([1, 2]), 0, SwarmErrorCode.MALFORMED_MESSAGE, /0 samples/],
    ["negative samples", f32([1, 2]), -2, SwarmErrorCode.MALFORMED_MESSAGE, /-2 samples/],
    ["fractional samples", f32([1, 2]), 1.5, SwarmErrorCode.MALFORMED_MESSAGE, /1.5 samples/],
  ])("rejects %s and stays unchanged", (_what, gradient, samples, code, message) => {
    const accumulator = new GradientAccumulator(2);
    accumulator.add(f32([1, 1]), 1);
    expect(() => {
      accumulator.add(gradient, samples);
    }).toThrow(expect.objectContaining({ code }));
    expect(() => {
      accumulator.add(gradient, samples);
    }).toThrow(message);
    expect(accumulator.samples).toBe(1);
    expect(accumulator.minibatches).toBe(1);
    expect(accumulator.mean()).toEqual(f32([1, 1]));
  });
});
