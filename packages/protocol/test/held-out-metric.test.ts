import { describe, expect, it } from "vitest";
import {
  HELD_OUT_METRICS,
  heldOutMetricOf,
  parseExperimentConfig,
  type ExperimentConfigInput,
} from "../src/index.ts";

const sha256 = "a".repeat(64);

function metricOf(input: ExperimentConfigInput): string {
  return heldOutMetricOf(parseExperimentConfig(input).model);
}

describe("held-out metric", () => {
  it("judges classifiers by accuracy, language models by perplexity and a regression by its MAE", () => {
    expect(metricOf({})).toBe("accuracy");
    expect(metricOf({ model: { kind: "albert-mlm" }, optimizer: { name: "lamb" } })).toBe("perplexity");
    expect(metricOf({ model: { kind: "uploaded", sha256 }, dataset: { name: "iris" } })).toBe("accuracy");
    expect(
      metricOf({
        model: { kind: "uploaded", sha256, task: "regression", metrics: ["mean-squared-error"] },
        dataset: { name: "houses" },
      }),
    ).toBe("mae");
    for (const task of ["next-token", "masked-tokens"] as const) {
      expect(metricOf({ model: { kind: "uploaded", sha256, task }, dataset: { name: "poems" } })).toBe(
        "perplexity",
      );
    }
  });

  it("lists every metric a config can be judged by", () => {
    expect([...HELD_OUT_METRICS].sort()).toEqual(["accuracy", "mae", "perplexity"]);
  });
});
