import { describe, expect, it } from "vitest";
import { SwarmErrorCode } from "../../src/errors.ts";
import { ParameterLayout } from "../../src/optim/parameter-layout.ts";

describe("ParameterLayout", () => {
  it("lays shapes out back to back", () => {
    const layout = ParameterLayout.fromShapes([
      { name: "dense/kernel", shape: [3, 4] },
      { name: "dense/bias", shape: [4] },
      { name: "scale", shape: [] },
    ]);
    expect(layout.size).toBe(17);
    expect(layout.largestSlot).toBe(12);
    expect(layout.slots).toEqual([
      { name: "dense/kernel", offset: 0, length: 12 },
      { name: "dense/bias", offset: 12, length: 4 },
      { name: "scale", offset: 16, length: 1 },
    ]);
  });

  it.each([
    [
      "a gap",
      [
        { name: "a", offset: 0, length: 2 },
        { name: "b", offset: 3, length: 1 },
      ],
      /starts at 3, expected 2/,
    ],
    [
      "an overlap",
      [
        { name: "a", offset: 0, length: 2 },
        { name: "b", offset: 1, length: 1 },
      ],
      /starts at 1/,
    ],
    ["a first slot not at 0", [{ name: "a", offset: 1, length: 2 }], /starts at 1, expected 0/],
    ["a fractional length", [{ name: "a", offset: 0, length: 1.5 }], /non-negative integer/],
    ["a negative length", [{ name: "a", offset: 0, length: -1 }], /non-negative integer/],
    ["no slots", [], /at least one tensor/],
  ])("rejects %s", (_what, slots, message) => {
    expect(() => new ParameterLayout(slots)).toThrow(
      expect.objectContaining({ code: SwarmErrorCode.LENGTH_MISMATCH }),
    );
    expect(() => new ParameterLayout(slots)).toThrow(message);
  });

  it("rejects duplicate and empty names", () => {
    const duplicate = [
      { name: "a", offset: 0, length: 1 },
      { name: "a", offset: 1, length: 1 },
    ];
    expect(() => new ParameterLayout(duplicate)).toThrow(
      expect.objectContaining({
        code: SwarmErrorCode.MALFORMED_MESSAGE,
        message: expect.stringMatching(/twice/) as unknown,
      }),
    );
    expect(() => new ParameterLayout([{ name: "", offset: 0, length: 1 }])).toThrow(/empty name/);
  });

  it("rejects a bad dimension", () => {
    expect(() => ParameterLayout.fromShapes([{ name: "a", shape: [2, -3] }])).toThrow(/\[2, -3\]/);
  });

  it("checks vector lengths", () => {
    const layout = ParameterLayout.fromShapes([{ name: "a", shape: [5] }]);
    expect(() => {
      layout.check(new Float32Array(5), "x");
    }).not.toThrow();
    expect(() => {
      layout.check(new Float32Array(4), "gradient");
    }).toThrow(
      expect.objectContaining({
        code: SwarmErrorCode.LENGTH_MISMATCH,
        message: "gradient has 4 elements, the parameter layout has 5",
      }),
    );
  });

  it("is immutable", () => {
    const layout = ParameterLayout.fromShapes([{ name: "a", shape: [5] }]);
    expect(Object.isFrozen(layout.slots)).toBe(true);
    expect(Object.isFrozen(layout.slots[0])).toBe(true);
  });
});
