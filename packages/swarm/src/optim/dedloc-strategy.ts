import { createFlatOptimizer } from "./create-flat-optimizer.ts";
import type { FlatOptimizer, OptimizerState } from "./flat-optimizer.ts";
import { GradientAccumulator } from "./gradient-accumulator.ts";
import { warmupLearningRate } from "./learning-rate.ts";
import type { ParameterLayout } from "./parameter-layout.ts";
import type {
  ContributionStepScale,
  StrategyConfig,
  StrategyRound,
  StrategyStep,
  TrainingStrategy,
} from "./training-strategy.ts";
import { l2Norm, scale } from "./vector-norm.ts";

/** The median sender's step with `dedloc`, as a share of the ℓ2 norm of an Adam step on the part. */
export const DEDLOC_STEP_SHARE = 0.1;

/**
 * The contribution step of `dedloc` (see ContributionStepScale). It averages gradients that Adam or
 * LAMB turn into a step of about the learning rate per coordinate, which has an ℓ2 norm of about
 * lr·√length on the part. The median sender's step gets a tenth of that (DEDLOC_STEP_SHARE): a raw
 * gradient concentrates on few coordinates, and along it a whole Adam-sized step already leaves the
 * region where the loss is near-linear (honest steps then raised mnist-mlp's held-out loss by up to
 * 40 %). A gradient 1,000 times the others' steps 1,000 times as far, and a sign-flipped one climbs
 * the loss.
 */
export function dedlocContributionStep(config: StrategyConfig): ContributionStepScale {
  const rate = config.optimizer.learningRate;
  return (partLength, medianNorm) => (DEDLOC_STEP_SHARE * rate * Math.sqrt(partLength)) / medianNorm;
}

/**
 * DeDLOC (§3.1): minibatch gradients are summed until the swarm has the target batch; the round
 * averages their mean, and every peer applies the same optimizer step (with the warm-up schedule and
 * clipping of the averaged gradient) to θ. The model trains at θ itself.
 */
export class DedlocStrategy implements TrainingStrategy {
  readonly name = "dedloc";
  readonly parameters: Float32Array;
  readonly #layout: ParameterLayout;
  readonly #optimizer: FlatOptimizer;
  readonly #baseRate: number;
  readonly #warmupSteps: number;
  readonly #clipNorm: number | undefined;
  /** The averaged gradient being applied (our own copy: clipping writes to it). */
  readonly #gradient: Float32Array;
  #accumulator: GradientAccumulator;
  /**
   * Minibatches for the step after the one forming (see `accumulateAhead`): computed at θ like the
   * others, they are one step stale when they are applied, as DeDLOC's peers that go on computing
   * while a round forms are.
   */
  #ahead: GradientAccumulator;
  /** A third accumulator, so a round in flight keeps its gradients while new ones come in. */
  #spare: GradientAccumulator;
  #version = 0;

  constructor(config: StrategyConfig, layout: ParameterLayout, parameters: Float32Array) {
    this.#layout = layout;
    this.parameters = parameters.slice();
    this.#optimizer = createFlatOptimizer(config.optimizer, layout);
    this.#baseRate = config.optimizer.learningRate;
    this.#warmupSteps = config.training.warmupSteps;
    this.#clipNorm = config.training.gradientClipNorm;
    this.#gradient = new Float32Array(layout.size);
    this.#accumulator = new GradientAccumulator(layout.size);
    this.#ahead = new GradientAccumulator(layout.size);
    this.#spare = new GradientAccumulator(layout.size);
  }

  get workingParameters(): Float32Array {
    return this.parameters;
  }

  get workingVersion(): number {
    return this.#version;
  }

  get samples(): number {
    return this.#accumulator.samples;
  }

  accumulate(gradientMean: Float32Array, samples: number): void {
    this.#accumulator.add(gradientMean, samples);
  }

  accumulateAhead(gradientMean: Float32Array, samples: number): void {
    this.#ahead.add(gradientMean, samples);
  }

  take(): StrategyRound {
    // The spare is empty: the round before this one was released or restored before a new take.
    const round = this.#accumulator;
    this.#accumulator = this.#ahead;
    this.#ahead = this.#spare;
    this.#spare = round;
    const release = () => {
      round.reset();
    };
    return {
      vector: round.mean(),
      samples: round.samples,
      apply: (averaged, epoch) => {
        release();
        return this.#apply(averaged, epoch);
      },
      restore: () => {
        this.#accumulator.absorb(round);
      },
      discard: release,
    };
  }

  #apply(averaged: Float32Array, epoch: number): StrategyStep {
    const gradient = this.#gradient;
    gradient.set(averaged);
    const norm = l2Norm(gradient);
    if (this.#clipNorm !== undefined && norm > this.#clipNorm) {
      scale(gradient, this.#clipNorm / norm);
    }
    const learningRate = warmupLearningRate(this.#baseRate, this.#warmupSteps, epoch);
    this.#optimizer.step(this.parameters, gradient, learningRate);
    this.#version += 1;
    return { learningRate, norm };
  }

  exportOptimizer(): OptimizerState {
    return this.#optimizer.exportState();
  }

  importState(parameters: Float32Array, optimizer: OptimizerState): void {
    this.#layout.check(parameters, "state parameter vector");
    this.#optimizer.importState(optimizer);
    this.parameters.set(parameters);
    this.#accumulator.reset();
    this.#ahead.reset();
    this.#spare.reset();
    this.#version += 1;
  }
}
