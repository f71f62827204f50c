import type { ExperimentConfig } from "@barnraise/protocol";
import { createFlatOptimizer } from "./create-flat-optimizer.ts";
import type { FlatOptimizer, OptimizerState } from "./flat-optimizer.ts";
import { checkMinibatch, GradientAccumulator } from "./gradient-accumulator.ts";
import { warmupLearningRate } from "./learning-rate.ts";
import type { ParameterLayout } from "./parameter-layout.ts";
import { SgdOptimizer } from "./sgd.ts";

/**
 * The one seam between the collaborative optimizer and the way a strategy trains (DeDLOC's shared
 * large-batch step, or DiLoCo's local steps and outer step). The collaborative optimizer owns the
 * swarm side (progress, rounds, retries, state loads, delayed rounds); a strategy owns the numbers:
 * what a minibatch does locally, which vector a round averages, and what the average does to the
 * shared parameters.
 */
export interface TrainingStrategy {
  readonly name: ExperimentConfig["averaging"]["strategy"];
  /** The shared parameters θ, the same bits on every peer after each step; updated in place. */
  readonly parameters: Float32Array;
  /** The parameters the model computes its gradients at (θ itself, or this peer's local copy). */
  readonly workingParameters: Float32Array;
  /** Bumped whenever `workingParameters` change, so the model knows when to reload them. */
  readonly workingVersion: number;
  /** Samples taken in since the last round was handed out. */
  readonly samples: number;
  /** Takes in one minibatch's mean gradient and size; refuses a bad one without changing anything. */
  accumulate(gradientMean: Float32Array, samples: number): void;
  /** Hands what was taken in so far to a round and starts taking in afresh. */
  take(): StrategyRound;
  /** The shared optimizer state (for donors and checkpoints). */
  exportOptimizer(): OptimizerState;
  /**
   * Replaces θ and the shared optimizer state (checked first; throws before changing anything) and
   * drops whatever was taken in since, which belongs to another state.
   */
  importState(parameters: Float32Array, optimizer: OptimizerState): void;
}

/** One round's contribution, as `TrainingStrategy.take` hands it out. Exactly one of the three calls ends it. */
export interface StrategyRound {
  /** The vector to average; nobody modifies it. */
  readonly vector: Float32Array;
  /** Its weight: the samples behind it. */
  readonly samples: number;
  /** Applies the group's weighted mean of `vector` as collaborative step `epoch` (0-based). */
  apply(averaged: Float32Array, epoch: number): StrategyStep;
  /** The round failed: what it took goes back, to be averaged with the next round. */
  restore(): void;
  /** The round is void (the state was replaced meanwhile): forget it. */
  discard(): void;
}

/** What applying a round did, for the step event. */
export interface StrategyStep {
  /** The learning rate of the shared step (DeDLOC's schedule, or DiLoCo's outer rate). */
  readonly learningRate: number;
  /** L2 norm of the averaged vector, before clipping. */
  readonly norm: number;
}

type StrategyConfig = Pick<ExperimentConfig, "optimizer" | "training" | "averaging">;

/** The strategy an experiment config asks for, starting from `parameters` (copied). */
export function createTrainingStrategy(
  config: StrategyConfig,
  layout: ParameterLayout,
  parameters: Float32Array,
): TrainingStrategy {
  layout.check(parameters, "initial parameter vector");
  switch (config.averaging.strategy) {
    case "dedloc":
      return new GradientAveraging(config, layout, parameters);
    case "diloco":
      return new LocalUpdates(config, layout, parameters);
  }
}

/**
 * DeDLOC (§3.1): minibatch gradients are summed until the swarm has the target batch; the round
 * averages their mean, and every peer applies the same optimizer step (with the warm-up schedule and
 * clipping of the averaged gradient) to θ. The model trains at θ itself.
 */
class GradientAveraging implements TrainingStrategy {
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
  /** A second accumulator, so a round in flight keeps its gradients while new ones come in. */
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

  take(): StrategyRound {
    const round = this.#accumulator;
    this.#accumulator = this.#spare;
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
    this.#spare.reset();
    this.#version += 1;
  }
}

/**
 * DiLoCo (Douillard et al., 2023): every minibatch takes an inner optimizer step (the config's
 * `optimizer`, with the warm-up schedule over this peer's inner steps and clipping of each minibatch
 * gradient) on this peer's local copy θ_local. A round averages the pseudo-gradient Δ = θ − θ_local,
 * weighted by the samples behind it, so a slow volunteer's few inner steps count for what they are;
 * every peer then applies the same outer step (`averaging.outerOptimizer`, Nesterov SGD) to θ and
 * starts again from it. Only θ and the outer state are shared; the inner optimizer's state stays on
 * this peer, across rounds and state loads.
 *
 * With a round in flight (delayed updates), the inner steps go on from θ_local; when the round's
 * result lands, the progress made meanwhile is carried over onto the new θ:
 * θ_local ← θ_new + (θ_local − θ_local at the round's start). Without inner steps in between,
 * θ_local becomes exactly θ_new.
 */
class LocalUpdates implements TrainingStrategy {
  readonly name = "diloco";
  readonly parameters: Float32Array;
  readonly workingParameters: Float32Array;
  readonly #layout: ParameterLayout;
  readonly #inner: FlatOptimizer;
  readonly #outer: SgdOptimizer;
  readonly #outerRate: number;
  readonly #innerRate: number;
  readonly #warmupSteps: number;
  readonly #clipNorm: number | undefined;
  /** The minibatch gradient being applied (our own copy: clipping writes to it). */
  readonly #gradient: Float32Array;
  #samples = 0;
  #version = 0;

  constructor(config: StrategyConfig, layout: ParameterLayout, parameters: Float32Array) {
    const outer = config.averaging.outerOptimizer;
    this.#layout = layout;
    this.parameters = parameters.slice();
    this.workingParameters = parameters.slice();
    this.#inner = createFlatOptimizer(config.optimizer, layout);
    this.#outer = new SgdOptimizer(outer, layout);
    this.#outerRate = outer.learningRate;
    this.#innerRate = config.optimizer.learningRate;
    this.#warmupSteps = config.training.warmupSteps;
    this.#clipNorm = config.training.gradientClipNorm;
    this.#gradient = new Float32Array(layout.size);
  }

  get workingVersion(): number {
    return this.#version;
  }

  get samples(): number {
    return this.#samples;
  }

  accumulate(gradientMean: Float32Array, samples: number): void {
    checkMinibatch(gradientMean, samples, this.#layout.size);
    const gradient = this.#gradient;
    gradient.set(gradientMean);
    const norm = l2Norm(gradient);
    if (this.#clipNorm !== undefined && norm > this.#clipNorm) scale(gradient, this.#clipNorm / norm);
    const rate = warmupLearningRate(this.#innerRate, this.#warmupSteps, this.#inner.stepCount);
    this.#inner.step(this.workingParameters, gradient, rate);
    this.#samples += samples;
    this.#version += 1;
  }

  take(): StrategyRound {
    const theta = this.parameters;
    const local = this.workingParameters;
    const delta = new Float32Array(theta.length);
    for (let i = 0; i < delta.length; i++) delta[i] = (theta[i] ?? 0) - (local[i] ?? 0);
    const samples = this.#samples;
    this.#samples = 0;
    const startVersion = this.#version;
    // Only needed when inner steps happen before the result lands (delayed updates).
    let start: Float32Array | undefined = local.slice();
    return {
      vector: delta,
      samples,
      apply: (averaged) => {
        const norm = l2Norm(averaged);
        const before = start ?? local;
        start = undefined;
        this.#outer.step(theta, averaged, this.#outerRate);
        if (this.#version === startVersion) {
          local.set(theta);
        } else {
          for (let i = 0; i < local.length; i++) {
            local[i] = (theta[i] ?? 0) + ((local[i] ?? 0) - (before[i] ?? 0));
          }
        }
        this.#version += 1;
        return { learningRate: this.#outerRate, norm };
      },
      restore: () => {
        start = undefined;
        this.#samples += samples;
      },
      discard: () => {
        start = undefined;
      },
    };
  }

  exportOptimizer(): OptimizerState {
    return this.#outer.exportState();
  }

  importState(parameters: Float32Array, optimizer: OptimizerState): void {
    this.#layout.check(parameters, "state parameter vector");
    this.#outer.importState(optimizer);
    this.parameters.set(parameters);
    this.workingParameters.set(parameters);
    this.#samples = 0;
    this.#version += 1;
  }
}

/** L2 norm summed in float64 in index order, the same bits on every peer. */
function l2Norm(vector: Float32Array): number {
  let sum = 0;
  // An index loop: iterating a typed array with for…of is several times slower here.
  for (let i = 0; i < vector.length; i++) {
    const value = vector[i] ?? 0;
    sum += value * value;
  }
  return Math.sqrt(sum);
}

function scale(vector: Float32Array, factor: number): void {
  for (let i = 0; i < vector.length; i++) vector[i] = (vector[i] ?? 0) * factor;
}
