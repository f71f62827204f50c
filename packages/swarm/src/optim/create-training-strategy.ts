import { DedlocStrategy } from "./dedloc-strategy.ts";
import { DilocoStrategy } from "./diloco-strategy.ts";
import type { ParameterLayout } from "./parameter-layout.ts";
import type { StrategyConfig, TrainingStrategy } from "./training-strategy.ts";

/** The strategy an experiment config asks for, starting from `parameters` (copied). */
export function createTrainingStrategy(
  config: StrategyConfig,
  layout: ParameterLayout,
  parameters: Float32Array,
): TrainingStrategy {
  layout.check(parameters, "initial parameter vector");
  switch (config.averaging.strategy) {
    case "dedloc":
      return new DedlocStrategy(config, layout, parameters);
    case "diloco":
      return new DilocoStrategy(config, layout, parameters);
  }
}
