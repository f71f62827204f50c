import type { ExperimentConfig } from "@barnraise/protocol";
import type { OptimizerState } from "./flat-optimizer.ts";

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
  /**
   * Takes in a minibatch for the step after the next one hands out: the swarm reached its target
   * while it was computed. It joins `samples` once `take` has handed out the round that is forming.
   * Absent where a minibatch cannot wait (`diloco`'s inner step moves the working parameters).
   */
  accumulateAhead?(gradientMean: Float32Array, samples: number): void;
  /** Hands what was taken in so far to a round, and goes on from what was taken in ahead. */
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

export type StrategyConfig = Pick<ExperimentConfig, "optimizer" | "training" | "averaging">;

/**
 * How far one sender's contribution (a vector of `partLength` values, the group's median sender's of
 * norm `medianNorm`) moves the shared parameters, as a factor on the contribution: what a validator
 * steps θ by to see whether the contribution lowers the held-out loss (see `contributionStepScale`).
 */
export type ContributionStepScale = (partLength: number, medianNorm: number) => number;
