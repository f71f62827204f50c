import { parseExperimentConfig } from "@barnraise/protocol";
import { describe, expect, it } from "vitest";
import { compressionName, strategyDescription } from "../app/_components/config-names.ts";

// How the experiment's page names its averaging strategy and compression.

describe("strategyDescription", () => {
  it("names DeDLOC by what it averages", () => {
    expect(strategyDescription(parseExperimentConfig({}).averaging)).toBe(
      "DeDLOC: gradients averaged to the target batch, one shared step",
    );
  });

  it("names DiLoCo with its outer optimizer", () => {
    const averaging = (outerOptimizer: Record<string, unknown> = {}) =>
      parseExperimentConfig({ averaging: { strategy: "diloco", outerOptimizer } }).averaging;
    expect(strategyDescription(averaging())).toBe(
      "DiLoCo: local steps, outer Nesterov SGD (learning rate 0.7, momentum 0.9)",
    );
    expect(strategyDescription(averaging({ learningRate: 0.5, momentum: 0, nesterov: false }))).toBe(
      "DiLoCo: local steps, outer SGD (learning rate 0.5, momentum 0)",
    );
    expect(strategyDescription(averaging({ learningRate: 1, momentum: 0 }))).toBe(
      "DiLoCo: local steps, outer SGD (learning rate 1, momentum 0)",
    );
  });
});

describe("compressionName", () => {
  it("gives top-k its density", () => {
    const compression = (input: Record<string, unknown>) =>
      parseExperimentConfig({ compression: input }).compression;
    expect(compressionName(compression({ method: "topk" }))).toBe("Top-k 1.5 % + error feedback");
    expect(compressionName(compression({ method: "topk", topkDensity: 0.05 }))).toBe(
      "Top-k 5 % + error feedback",
    );
    expect(compressionName(compression({ method: "blockwise8", topkDensity: 0.05 }))).toBe("Blockwise 8-bit");
    expect(compressionName(compression({}))).toBe("Adaptive");
  });
});
