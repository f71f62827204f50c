import type { ExperimentConfig } from "@barnraise/protocol";
import type { Aggregator } from "./aggregator.ts";
import { CenteredClip } from "./centered-clip.ts";
import { weightedMean } from "./weighted-mean.ts";

/** The aggregation an experiment config asks for: the one place that reads `averaging.aggregation`. */
export function createAggregator(averaging: ExperimentConfig["averaging"]): Aggregator {
  switch (averaging.aggregation) {
    case "mean":
      return weightedMean;
    case "centered-clip":
      return new CenteredClip(averaging.centeredClip.tau, averaging.centeredClip.iterations);
  }
}
