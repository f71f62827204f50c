import { createFlatOptimizer } from "./create-flat-optimizer.ts";
import type { FlatOptimizer, OptimizerState } from "./flat-optimizer.ts";
import { checkMinibatch } from "./gradient-accumulator.ts";
import { warmupLearningRate } from "./learning-rate.ts";
import type { ParameterLayout } from "./parameter-layout.ts";
import { SgdOptimizer } from "./sgd.ts";
import type {
  ContributionStepScale,
  StrategyConfig,
  StrategyRound,
  TrainingStrategy,
} from "./training-strategy.ts";
import { l2Norm, scale } from "./vector-norm.ts";

/**
 * The contribution step of `diloco` (see ContributionStepScale): it averages pseudo-gradients that
 * are steps already, which the outer SGD moves θ by its learning rate times (before momentum), so
 * each is scaled by that rate.
 */
export function dilocoContributionStep(config: StrategyConfig): ContributionStepScale {
  const rate = config.averaging.outerOptimizer.learningRate;
  return () => rate;
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
export class DilocoStrategy implements TrainingStrategy {
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
