import { describe, expect, it } from "vitest";
import { expectedIterations, moshpitDimensions, optimalGroupSize } from "../../src/averaging/group-size.ts";

describe("moshpitDimensions", () => {
  it("is ⌈log_m n⌉, exact at powers where floating-point logs are off by one", () => {
    expect(moshpitDimensions(125, 5)).toBe(3); // Math.log(125) / Math.log(5) = 3.0000000000000004
    expect(moshpitDimensions(126, 5)).toBe(4);
    expect(moshpitDimensions(243, 3)).toBe(5);
    expect(moshpitDimensions(1024, 2)).toBe(10);
    expect(moshpitDimensions(1025, 2)).toBe(11);
    expect(moshpitDimensions(1000, 10)).toBe(3);
    expect(moshpitDimensions(768, 32)).toBe(2);
  });

  it("is 1 when one group holds everyone", () => {
    expect(moshpitDimensions(5, 5)).toBe(1);
    expect(moshpitDimensions(3, 8)).toBe(1);
    expect(moshpitDimensions(1, 1)).toBe(1);
    expect(moshpitDimensions(0, 2)).toBe(1);
  });

  it("refuses impossible grids", () => {
    expect(() => moshpitDimensions(2, 1)).toThrow(RangeError);
    expect(() => moshpitDimensions(10, 0)).toThrow(RangeError);
    expect(() => moshpitDimensions(-1, 2)).toThrow(RangeError);
    expect(() => moshpitDimensions(10.5, 2)).toThrow(RangeError);
  });
});

describe("expectedIterations", () => {
  it("divides the rounds by the chance that a group of m succeeds", () => {
    expect(expectedIterations(100, 0, 10)).toBe(2);
    expect(expectedIterations(100, 0.5, 2)).toBe(7 * 4); // 7 rounds, each succeeds with 1/4
    expect(expectedIterations(1000, 0.01, 32)).toBeCloseTo(2 / 0.99 ** 32, 12);
  });
});

describe("optimalGroupSize", () => {
  it("picks m = n when nobody fails and n fits in one group (what DeDLOC observed)", () => {
    for (const n of [2, 3, 7, 16, 64]) expect(optimalGroupSize(n, 0, 64)).toBe(n);
  });

  it("picks the largest group allowed when nobody fails but n does not fit", () => {
    // m = 10 … 16 all need 2 rounds; the tie goes to the larger group.
    expect(optimalGroupSize(100, 0, 16)).toBe(16);
  });

  it("shrinks groups as failures grow, down to pairs (decentralized SGD)", () => {
    // p = 1%: one group of 1000 succeeds with 0.99^1000 ≈ 4e-5; 32 is the smallest m with 2 rounds.
    expect(optimalGroupSize(1000, 0.01, 1000)).toBe(32);
    // p = 50%: pairs need 7 rounds × 4 tries = 28 iterations, triples 5 × 8 = 40.
    expect(optimalGroupSize(100, 0.5, 100)).toBe(2);
    const sizes = [0, 0.001, 0.01, 0.05, 0.2, 0.5].map((p) => optimalGroupSize(500, p, 500));
    for (let i = 1; i < sizes.length; i++) expect(sizes[i]).toBeLessThanOrEqual(sizes[i - 1] ?? 0);
    expect(sizes[0]).toBe(500);
    expect(sizes.at(-1)).toBe(2);
  });

  it("agrees with a brute-force search over every allowed m", () => {
    for (const n of [2, 5, 9, 30, 100, 257, 1000]) {
      for (const p of [0, 0.002, 0.02, 0.1, 0.3]) {
        for (const max of [2, 8, 64, 1000]) {
          const top = Math.min(n, max);
          const candidates = Array.from({ length: top - 1 }, (_, i) => i + 2);
          const best = Math.min(...candidates.map((m) => expectedIterations(n, p, m)));
          const chosen = optimalGroupSize(n, p, max);
          expect(chosen).toBeLessThanOrEqual(top);
          expect(expectedIterations(n, p, chosen)).toBe(best);
          // ties go to the larger m
          expect(candidates.filter((m) => m > chosen && expectedIterations(n, p, m) === best)).toEqual([]);
        }
      }
    }
  });

  it("returns 1 when there is nobody to average with", () => {
    expect(optimalGroupSize(1, 0.1, 16)).toBe(1);
    expect(optimalGroupSize(0, 0, 16)).toBe(1);
  });

  it("refuses bad input", () => {
    expect(() => optimalGroupSize(10, 1, 16)).toThrow(RangeError);
    expect(() => optimalGroupSize(10, -0.1, 16)).toThrow(RangeError);
    expect(() => optimalGroupSize(10, NaN, 16)).toThrow(RangeError);
    expect(() => optimalGroupSize(10, 0, 1)).toThrow(RangeError);
    expect(() => optimalGroupSize(2.5, 0, 16)).toThrow(RangeError);
  });
});
