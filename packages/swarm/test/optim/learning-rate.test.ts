import { describe, expect, it } from "vitest";
import { warmupLearningRate } from "../../src/optim/learning-rate.ts";

describe("warmupLearningRate", () => {
  it("rises linearly over the warm-up steps, then stays at the base rate", () => {
    const expected = [0.2, 0.4, 0.6, 0.8, 0.8, 0.8, 0.8];
    [0, 1, 2, 3, 4, 5, 100].forEach((step, i) => {
      expect(warmupLearningRate(0.8, 4, step)).toBeCloseTo(expected[i] ?? Number.NaN, 15);
    });
  });

  it("is constant without warm-up", () => {
    expect(warmupLearningRate(1e-3, 0, 0)).toBe(1e-3);
    expect(warmupLearningRate(1e-3, 0, 7)).toBe(1e-3);
  });
});
