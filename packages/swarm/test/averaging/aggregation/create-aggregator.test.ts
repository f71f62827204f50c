import { parseExperimentConfig } from "@barnraise/protocol";
import { describe, expect, it } from "vitest";
import { CenteredClip } from "../../../src/averaging/aggregation/centered-clip.ts";
import { createAggregator } from "../../../src/averaging/aggregation/create-aggregator.ts";
import { weightedMean } from "../../../src/averaging/aggregation/weighted-mean.ts";

describe("the aggregation a config asks for", () => {
  it("is the weighted mean or CenteredClip with the config's tau and iterations", () => {
    const mean = parseExperimentConfig({ averaging: { aggregation: "mean" } }).averaging;
    expect(createAggregator(mean)).toBe(weightedMean);
    const clip = parseExperimentConfig({
      averaging: { aggregation: "centered-clip", centeredClip: { tau: 1.5, iterations: 3 } },
    }).averaging;
    const points = [0, 1, 2, 3, 100].map((value) => Float32Array.of(value));
    const weights = points.map(() => 1);
    const aggregator = createAggregator(clip);
    expect(aggregator).toBeInstanceOf(CenteredClip);
    expect(aggregator.aggregate(points, weights)).toEqual(
      new CenteredClip(1.5, 3).aggregate(points, weights),
    );
  });

  it("computes the weighted mean in float64 and refuses a CenteredClip it cannot run", () => {
    expect(weightedMean.aggregate([Float32Array.of(1, 2), Float32Array.of(4, 8)], [1, 3])).toEqual(
      Float32Array.of(3.25, 6.5),
    );
    expect(() => new CenteredClip(-1, 10)).toThrow(RangeError);
    expect(() => new CenteredClip(Number.NaN, 10)).toThrow(RangeError);
    expect(() => new CenteredClip(2, 0)).toThrow(RangeError);
  });
});
