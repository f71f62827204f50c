import type { ExperimentConfig } from "@barnraise/protocol";
import { SwarmError, SwarmErrorCode, isSwarmError } from "../errors.ts";
import { createFlatOptimizer, type FlatOptimizer } from "./flat-optimizer.ts";
import { GradientAccumulator } from "./gradient-accumulator.ts";
import { warmupLearningRate } from "./learning-rate.ts";
import type { ParameterLayout } from "./parameter-layout.ts";
import type { AveragedVector, AveragerPort, EpochState, ProgressPort, StatePort } from "./ports.ts";

export interface CollaborativeOptimizerOptions {
  /** Only `optimizer`, `training` and `averaging` are read. */
  readonly config: Pick<ExperimentConfig, "optimizer" | "training" | "averaging">;
  readonly layout: ParameterLayout;
  /** Initial parameters; copied. Every peer must start from the same bits (seeded initialization). */
  readonly parameters: Float32Array;
  readonly progress: ProgressPort;
  readonly averager: AveragerPort;
  readonly state: StatePort;
  /** Clock in milliseconds, for the samples/s estimate; default `Date.now`. */
  readonly now?: () => number;
}

/** What the optimizer did, for logs. `epoch` is always the epoch the peer is in after the event. */
export type CollaborativeOptimizerEvent =
  | {
      readonly type: "step";
      readonly epoch: number;
      readonly groupSize: number;
      readonly totalWeight: number;
      readonly localSamples: number;
      readonly learningRate: number;
      /** L2 norm of the averaged gradient before clipping. */
      readonly gradientNorm: number;
    }
  | {
      readonly type: "round-failed";
      readonly epoch: number;
      readonly localSamples: number;
      readonly error: unknown;
    }
  | { readonly type: "state-loaded"; readonly epoch: number; readonly previousEpoch: number }
  | { readonly type: "state-load-failed"; readonly epoch: number; readonly error: unknown };

export type CollaborativeOptimizerListener = (event: CollaborativeOptimizerEvent) => void;

/** Weight of the newest minibatch in the samples/s moving average. */
const RATE_SMOOTHING = 0.2;

/**
 * The collaborative optimizer of DeDLOC §3.1: the peer accumulates minibatch gradients at its own pace;
 * once the swarm has the target batch for the epoch, every peer averages its mean gradient weighted by
 * its samples, and all apply the same optimizer step to the same bits, so the swarm trains exactly like
 * one large-batch optimizer. Stale or new peers catch up by downloading state from donors.
 *
 * With `delayedParameterUpdates`, the round runs in the background: `maybeStep` returns at once, the
 * peer moves to the next epoch and keeps training with the current parameters, and the averaged update
 * lands when the round finishes (one step stale). A failed round is undone: the epoch goes back and the
 * gradients of that epoch rejoin the accumulator, so nothing is lost in either mode.
 */
export class CollaborativeOptimizer {
  readonly #layout: ParameterLayout;
  readonly #optimizer: FlatOptimizer;
  readonly #parameters: Float32Array;
  /** The averaged gradient of the round being applied (our own copy: clipping writes to it). */
  readonly #gradient: Float32Array;
  readonly #progress: ProgressPort;
  readonly #averager: AveragerPort;
  readonly #state: StatePort;
  readonly #now: () => number;
  readonly #baseRate: number;
  readonly #warmupSteps: number;
  readonly #clipNorm: number | undefined;
  readonly #delayed: boolean;
  readonly #listeners = new Set<CollaborativeOptimizerListener>();
  /** Gradients for the epoch being accumulated; `#spare` holds a round's gradients while it runs. */
  #accumulator: GradientAccumulator;
  #spare: GradientAccumulator;
  /** The epoch being accumulated; with a delayed round in flight, one ahead of `#stateEpoch`. */
  #epoch = 0;
  /** The epoch the parameters belong to (updates applied). */
  #stateEpoch = 0;
  /** The epoch of the delayed round running in the background, reported so its leader waits for us. */
  #averagingEpoch: number | undefined;
  /** Bumped whenever the state is replaced, so a round started before can tell its result is stale. */
  #generation = 0;
  #joined = false;
  #busy = false;
  #pending: Promise<void> | null = null;
  #samplesPerSecond = 0;
  #lastAccumulateAt: number | undefined;

  constructor(options: CollaborativeOptimizerOptions) {
    const { config, layout } = options;
    layout.check(options.parameters, "initial parameter vector");
    this.#layout = layout;
    this.#optimizer = createFlatOptimizer(config.optimizer, layout);
    this.#parameters = options.parameters.slice();
    this.#gradient = new Float32Array(layout.size);
    this.#accumulator = new GradientAccumulator(layout.size);
    this.#spare = new GradientAccumulator(layout.size);
    this.#progress = options.progress;
    this.#averager = options.averager;
    this.#state = options.state;
    this.#now = options.now ?? Date.now;
    this.#baseRate = config.optimizer.learningRate;
    this.#warmupSteps = config.training.warmupSteps;
    this.#clipNorm = config.training.gradientClipNorm;
    this.#delayed = config.averaging.delayedParameterUpdates;
  }

  /** The live parameter vector, updated in place by each step and state load. */
  get parameters(): Float32Array {
    return this.#parameters;
  }

  /** The epoch this peer accumulates gradients for. */
  get epoch(): number {
    return this.#epoch;
  }

  /** Samples accumulated toward the current epoch. */
  get samplesAccumulated(): number {
    return this.#accumulator.samples;
  }

  /** Smoothed local throughput, from the intervals between `accumulate` calls. */
  get samplesPerSecond(): number {
    return this.#samplesPerSecond;
  }

  /** Subscribes to events; returns the unsubscribe function. Errors thrown by a listener are ignored. */
  on(listener: CollaborativeOptimizerListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Adds one local minibatch (its mean gradient and size) and publishes the new progress. */
  accumulate(gradientMean: Float32Array, samples: number): void {
    this.#accumulator.add(gradientMean, samples);
    const now = this.#now();
    if (this.#lastAccumulateAt !== undefined && now > this.#lastAccumulateAt) {
      const rate = (samples * 1000) / (now - this.#lastAccumulateAt);
      this.#samplesPerSecond =
        this.#samplesPerSecond === 0
          ? rate
          : this.#samplesPerSecond + RATE_SMOOTHING * (rate - this.#samplesPerSecond);
    }
    this.#lastAccumulateAt = now;
    this.#report();
  }

  /**
   * Runs a collaborative step if the swarm is ready for it: the target batch is reached for our epoch,
   * or the swarm is already one epoch ahead. Returns true when a step was applied (or, with delayed
   * updates, started). Returns false when it is not time yet, a round or state load failed (the
   * gradients are kept; call again later), or state was just adopted from a donor — which happens on
   * the first call, whenever the swarm is more than one epoch ahead, and when a round fails while the
   * swarm has moved past its epoch. Throws ABORTED if `signal` fires.
   */
  async maybeStep(signal?: AbortSignal): Promise<boolean> {
    throwIfAborted(signal);
    if (this.#busy || this.#pending !== null) return false;
    this.#busy = true;
    try {
      if (!this.#joined) {
        const outcome = await this.#loadNewerState(signal);
        if (outcome === "failed") return false;
        this.#joined = true;
        if (outcome === "adopted") return false;
      }
      const global = this.#progress.global();
      if (global.epoch > this.#epoch + 1) {
        await this.#loadNewerState(signal);
        return false;
      }
      const ready =
        global.epoch > this.#epoch ||
        (global.epoch === this.#epoch && global.samplesAccumulated >= global.targetBatchSize);
      if (!ready) return false;
      const stepped = await this.#startRound(signal);
      if (!stepped && this.#progress.global().epoch > this.#epoch) {
        // The swarm finished this epoch without us (a late joiner whose state was already one step
        // old, or a round that failed here but not for the others): catch up at once, rather than
        // after a retry delay in which a fast swarm moves further ahead.
        await this.#loadNewerState(signal);
      }
      return stepped;
    } finally {
      this.#busy = false;
    }
  }

  /** The delayed round in flight, if any; it never rejects. Await it before shutting down. */
  pendingStep(): Promise<void> | null {
    return this.#pending;
  }

  /** Epoch, a copy of the parameters and the optimizer state, consistent with each other (for donors). */
  exportState(): EpochState {
    return {
      epoch: this.#stateEpoch,
      parameters: this.#parameters.slice(),
      optimizer: this.#optimizer.exportState(),
    };
  }

  /**
   * Adopts `state` (copied) and drops the accumulated gradients, which belong to an older epoch.
   * Everything is checked before anything changes; a delayed round still in flight is discarded.
   */
  importState(state: EpochState): void {
    if (!Number.isSafeInteger(state.epoch) || state.epoch < 0) {
      throw new SwarmError(
        SwarmErrorCode.MALFORMED_MESSAGE,
        `state epoch ${state.epoch} is not an integer ≥ 0`,
      );
    }
    this.#layout.check(state.parameters, "state parameter vector");
    const bad = state.parameters.findIndex((value) => !Number.isFinite(value));
    if (bad !== -1) {
      throw new SwarmError(
        SwarmErrorCode.MALFORMED_MESSAGE,
        `state parameter ${bad} is ${state.parameters[bad]}`,
      );
    }
    this.#optimizer.importState(state.optimizer);
    this.#parameters.set(state.parameters);
    this.#epoch = state.epoch;
    this.#stateEpoch = state.epoch;
    this.#averagingEpoch = undefined;
    this.#generation += 1;
    this.#joined = true;
    this.#accumulator.reset();
    this.#spare.reset();
    this.#lastAccumulateAt = undefined;
    this.#report();
  }

  async #loadNewerState(signal: AbortSignal | undefined): Promise<"adopted" | "none" | "failed"> {
    const previousEpoch = this.#epoch;
    const generation = this.#generation;
    try {
      const loaded = await this.#state.loadNewer(previousEpoch, signal);
      if (loaded === null || loaded.epoch <= this.#epoch || generation !== this.#generation) return "none";
      this.importState(loaded);
      this.#emit({ type: "state-loaded", epoch: this.#epoch, previousEpoch });
      return "adopted";
    } catch (error) {
      throwIfAborted(signal, error);
      this.#emit({ type: "state-load-failed", epoch: this.#epoch, error });
      return "failed";
    }
  }

  /** Hands the accumulated gradients to a round; with delayed updates, moves on to the next epoch at once. */
  #startRound(signal: AbortSignal | undefined): Promise<boolean> {
    const epoch = this.#epoch;
    const round = this.#accumulator;
    this.#accumulator = this.#spare;
    this.#spare = round;
    if (!this.#delayed) return this.#runRound(epoch, round, signal);
    this.#epoch = epoch + 1;
    this.#averagingEpoch = epoch;
    this.#report();
    // #runRound undoes its own failures and reports them; a background round only rethrows an abort.
    this.#pending = this.#runRound(epoch, round, signal)
      .then(
        () => undefined,
        () => undefined,
      )
      .finally(() => {
        this.#pending = null;
      });
    return Promise.resolve(true);
  }

  /** Averages `round`'s gradients for `epoch` and applies the result; undoes the round if it fails. */
  async #runRound(
    epoch: number,
    round: GradientAccumulator,
    signal: AbortSignal | undefined,
  ): Promise<boolean> {
    const generation = this.#generation;
    const localSamples = round.samples;
    let result: AveragedVector;
    try {
      result = await this.#averager.average(epoch, round.mean(), localSamples, signal);
      this.#checkAveraged(result);
    } catch (error) {
      if (generation === this.#generation) {
        this.#accumulator.absorb(round);
        this.#epoch = epoch;
        this.#averagingEpoch = undefined;
        this.#report();
        this.#emit({ type: "round-failed", epoch, localSamples, error });
      }
      round.reset();
      throwIfAborted(signal, error);
      return false;
    }
    round.reset();
    if (generation !== this.#generation) return false;
    const gradient = this.#gradient;
    gradient.set(result.vector);
    const gradientNorm = l2Norm(gradient);
    if (this.#clipNorm !== undefined && gradientNorm > this.#clipNorm) {
      const scale = this.#clipNorm / gradientNorm;
      for (let i = 0; i < gradient.length; i++) gradient[i] = (gradient[i] ?? 0) * scale;
    }
    const learningRate = warmupLearningRate(this.#baseRate, this.#warmupSteps, epoch);
    this.#optimizer.step(this.#parameters, gradient, learningRate);
    this.#stateEpoch = epoch + 1;
    this.#epoch = epoch + 1;
    this.#averagingEpoch = undefined;
    if (!this.#delayed) this.#lastAccumulateAt = undefined; // the averaging time is not training time
    this.#report();
    const { groupSize, totalWeight } = result;
    this.#emit({
      type: "step",
      epoch: epoch + 1,
      groupSize,
      totalWeight,
      localSamples,
      learningRate,
      gradientNorm,
    });
    return true;
  }

  #checkAveraged(result: AveragedVector): void {
    this.#layout.check(result.vector, "averaged gradient");
    if (!(result.totalWeight > 0) || !Number.isFinite(result.totalWeight)) {
      throw new SwarmError(
        SwarmErrorCode.ALLREDUCE_FAILED,
        `the group's total weight is ${result.totalWeight}`,
      );
    }
    const bad = result.vector.findIndex((value) => !Number.isFinite(value));
    if (bad !== -1) {
      throw new SwarmError(
        SwarmErrorCode.MALFORMED_MESSAGE,
        `averaged gradient element ${bad} is ${result.vector[bad]}`,
      );
    }
  }

  #report(): void {
    this.#progress.report({
      epoch: this.#epoch,
      samplesAccumulated: this.#accumulator.samples,
      samplesPerSecond: this.#samplesPerSecond,
      ...(this.#averagingEpoch === undefined ? {} : { averagingEpoch: this.#averagingEpoch }),
    });
  }

  #emit(event: CollaborativeOptimizerEvent): void {
    for (const listener of this.#listeners) {
      try {
        listener(event);
      } catch {
        // A logging hook must not break training.
      }
    }
  }
}

/** L2 norm summed in float64 in index order, the same bits on every peer. */
function l2Norm(vector: Float32Array): number {
  let sum = 0;
  for (const value of vector) sum += value * value;
  return Math.sqrt(sum);
}

function throwIfAborted(signal: AbortSignal | undefined, cause?: unknown): void {
  if (signal?.aborted !== true) return;
  if (isSwarmError(cause, SwarmErrorCode.ABORTED)) throw cause;
  throw new SwarmError(SwarmErrorCode.ABORTED, "the collaborative step was cancelled", {
    cause: cause ?? signal.reason,
  });
}
