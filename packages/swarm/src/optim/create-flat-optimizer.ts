import type { ExperimentConfig } from "@barnraise/protocol";
import { AdamOptimizer } from "./adam.ts";
import type { FlatOptimizer } from "./flat-optimizer.ts";
import { LambOptimizer } from "./lamb.ts";
import type { ParameterLayout } from "./parameter-layout.ts";

/** Builds the optimizer an experiment config asks for. */
export function createFlatOptimizer(
  config: ExperimentConfig["optimizer"],
  layout: ParameterLayout,
): FlatOptimizer {
  switch (config.name) {
    case "adam":
      return new AdamOptimizer(config, layout);
    case "lamb":
      return new LambOptimizer(config, layout);
  }
}
