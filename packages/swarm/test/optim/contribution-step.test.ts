import { parseExperimentConfig } from "@barnraise/protocol";
import { describe, expect, it } from "vitest";
import { contributionStepScale } from "../../src/optim/create-training-strategy.ts";

describe("contributionStepScale", () => {
  it("gives the median sender a tenth of an Adam step's norm with dedloc, and the outer rate with diloco", () => {
    const dedloc = contributionStepScale(
      parseExperimentConfig({ optimizer: { name: "adam", learningRate: 0.002 } }),
    );
    expect(dedloc(10_000, 4)).toBeCloseTo((0.1 * 0.002 * 100) / 4, 12);
    const diloco = contributionStepScale(
      parseExperimentConfig({ averaging: { strategy: "diloco", outerOptimizer: { learningRate: 0.5 } } }),
    );
    expect(diloco(10_000, 4)).toBe(0.5);
  });
});
