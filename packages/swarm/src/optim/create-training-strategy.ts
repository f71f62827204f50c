import { dedlocContributionStep, DedlocStrategy } from "./dedloc-strategy.ts";
import { dilocoContributionStep, DilocoStrategy } from "./diloco-strategy.ts";
import type { ParameterLayout } from "./parameter-layout.ts";
import type { ContributionStepScale, StrategyConfig, TrainingStrategy } from "./training-strategy.ts";

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

/** How far a sender's contribution moves θ under the config's strategy (see ContributionStepScale). */
export function contributionStepScale(config: StrategyConfig): ContributionStepScale {
  switch (config.averaging.strategy) {
    case "dedloc":
      return dedlocContributionStep(config);
    case "diloco":
      return dilocoContributionStep(config);
  }
}
