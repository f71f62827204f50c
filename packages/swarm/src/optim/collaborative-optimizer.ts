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
  /** Clock in milliseconds, for the samples/s estimate and retry delays; default `Date.now`. */
  readonly now?: () => number;
  /**
   * When the swarm is ahead but nobody could give newer state, how long to train on at its own
   * epoch before trying to load again (sooner when the swarm moves on meanwhile); default 30 s.
   */
  readonly noDonorRetryMs?: number;
  /** The experiment config version this peer trains under; carried in the exported state. */
  readonly configVersion?: number;
}

/** What the optimizer did, for logs. `epoch` is always the epoch the peer is in after the event. */
export type CollaborativeOptimizerEvent =
  | {
      readonly type: "step";
      readonly epoch: number;
      readonly groupSize: number;
      readonly totalWeight: number;
      readonly localSamples: number;
      /**
       * Whether this peer's samples went into the swarm's model: the step averaged them with another
       * trainer's, or no other trainer was in the swarm. False for a step taken alone while others
       * train (a group of one, or behind the swarm with nobody to hand over its state): those samples
       * trained a model of this peer's own, and do not count as a contribution.
       */
      readonly shared: boolean;
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
  | { readonly type: "state-load-failed"; readonly epoch: number; readonly error: unknown }
  | {
      /**
       * The swarm is at `swarmEpoch`, ahead of this peer, and nobody could give it newer state: it
       * trains on at its own epoch, with whoever is at it, and tries again in `retryInMs`.
       */
      readonly type: "no-donor";
      readonly epoch: number;
      readonly swarmEpoch: number;
      readonly retryInMs: number;
    };

export type CollaborativeOptimizerListener = (event: CollaborativeOptimizerEvent) => void;

/** Weight of the newest minibatch in the samples/s moving average. */
const RATE_SMOOTHING = 0.2;
const DEFAULT_NO_DONOR_RETRY_MS = 30_000;

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
 *
 * It never stalls. A peer behind the swarm that finds nobody to give it newer state (no donor, or
 * none with anything newer) remembers that for `noDonorRetryMs` and meanwhile trains on at its own
 * epoch: it averages with whoever is at that epoch, or steps alone when nobody is, and tries to load
 * again after the delay or as soon as the swarm moves further ahead.
 *
 * The state carries the run's lineage: its `generation` (rollbacks so far; progress of another
 * generation is ignored by the swarm) and `runSamples`, the samples of every step applied since the
 * run began.
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
  readonly #noDonorRetryMs: number;
  readonly #configVersion: number | undefined;
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
  #revision = 0;
  /** The run generation of the state (rollbacks so far). */
  #generation = 0;
  /** The run's sample counter: Σ total weight of the steps applied to this state. */
  #runSamples = 0;
  /** Set while nobody can give newer state: until when, and the swarm's epoch when that was found. */
  #noDonor: { readonly until: number; readonly swarmEpoch: number } | null = null;
  #noDonorReportedAt = -Infinity;
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
    this.#noDonorRetryMs = options.noDonorRetryMs ?? DEFAULT_NO_DONOR_RETRY_MS;
    if (!(this.#noDonorRetryMs >= 0)) {
      throw new SwarmError(
        SwarmErrorCode.MALFORMED_MESSAGE,
        `noDonorRetryMs must be ≥ 0, got ${this.#noDonorRetryMs}`,
      );
    }
    if (options.configVersion !== undefined) checkCount(options.configVersion, "config version");
    this.#configVersion = options.configVersion;
  }

  /** The live parameter vector, updated in place by each step and state load. */
  get parameters(): Float32Array {
    return this.#parameters;
  }

  /** The epoch this peer accumulates gradients for. */
  get epoch(): number {
    return this.#epoch;
  }

  /** The run generation (rollbacks so far) of this peer's state; 0 until a state says otherwise. */
  get generation(): number {
    return this.#generation;
  }

  /** The run's sample counter: the total weight of every step applied since the run began. */
  get runSamples(): number {
    return this.#runSamples;
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
   * swarm has moved past its epoch. When no newer state can be had, it goes on at its own epoch (see
   * the class comment). Throws ABORTED if `signal` fires.
   */
  async maybeStep(signal?: AbortSignal): Promise<boolean> {
    throwIfAborted(signal);
    if (this.#busy || this.#pending !== null) return false;
    this.#busy = true;
    try {
      const global = this.#progress.global();
      const noDonor = this.#noDonor;
      if (noDonor !== null && (this.#now() >= noDonor.until || global.epoch > noDonor.swarmEpoch)) {
        this.#noDonor = null;
      }
      const behind = global.epoch > this.#epoch + 1;
      if (!this.#joined || (this.#noDonor === null && behind)) {
        this.#joined = true;
        const outcome = await this.#loadNewerState(signal);
        if (outcome === "adopted") return false;
        if (outcome === "failed" || behind) this.#rememberNoDonor(global.epoch);
        if (outcome === "failed") return false;
      }
      if (this.#noDonor !== null) return await this.#stepAtOwnEpoch(signal);
      const ready =
        global.epoch > this.#epoch ||
        (global.epoch === this.#epoch && global.samplesAccumulated >= global.targetBatchSize);
      if (!ready) return false;
      const stepped = await this.#startRound(signal, false);
      const after = this.#progress.global();
      if (!stepped && after.epoch > this.#epoch) {
        // The swarm finished this epoch without us (a late joiner whose state was already one step
        // old, or a round that failed here but not for the others): catch up at once, rather than
        // after a retry delay in which a fast swarm moves further ahead.
        const outcome = await this.#loadNewerState(signal);
        if (outcome !== "adopted") this.#rememberNoDonor(after.epoch);
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

  /**
   * Epoch, a copy of the parameters and the optimizer state, consistent with each other (for donors
   * and checkpoints), with the run's generation, sample counter and config version.
   */
  exportState(): EpochState {
    return {
      epoch: this.#stateEpoch,
      parameters: this.#parameters.slice(),
      optimizer: this.#optimizer.exportState(),
      generation: this.#generation,
      samples: this.#runSamples,
      ...(this.#configVersion === undefined ? {} : { configVersion: this.#configVersion }),
    };
  }

  /**
   * Adopts `state` (copied), with its generation (absent: 0) and sample counter (absent: 0), and
   * drops the accumulated gradients, which belong to another epoch. The epoch may go backwards (a
   * rollback or a resume from a checkpoint). Everything is checked before anything changes; a
   * delayed round still in flight is discarded.
   */
  importState(state: EpochState): void {
    checkCount(state.epoch, "state epoch");
    if (state.generation !== undefined) checkCount(state.generation, "state generation");
    if (state.samples !== undefined && !(state.samples >= 0 && Number.isFinite(state.samples))) {
      throw new SwarmError(
        SwarmErrorCode.MALFORMED_MESSAGE,
        `state sample counter ${state.samples} is not a finite number ≥ 0`,
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
    this.#revision += 1;
    this.#generation = state.generation ?? 0;
    this.#runSamples = state.samples ?? 0;
    this.#noDonor = null;
    this.#joined = true;
    this.#accumulator.reset();
    this.#spare.reset();
    this.#lastAccumulateAt = undefined;
    this.#report();
  }

  async #loadNewerState(signal: AbortSignal | undefined): Promise<"adopted" | "none" | "failed"> {
    const previousEpoch = this.#epoch;
    const revision = this.#revision;
    const generation = this.#generation;
    try {
      const loaded = await this.#state.loadNewer(previousEpoch, generation, signal);
      if (
        loaded === null ||
        loaded.epoch <= this.#epoch ||
        revision !== this.#revision ||
        (loaded.generation ?? 0) !== generation
      ) {
        return "none";
      }
      this.importState(loaded);
      this.#emit({ type: "state-loaded", epoch: this.#epoch, previousEpoch });
      return "adopted";
    } catch (error) {
      throwIfAborted(signal, error);
      this.#emit({ type: "state-load-failed", epoch: this.#epoch, error });
      return "failed";
    }
  }

  /**
   * Nobody can give newer state: the swarm is `swarmEpoch`, ahead of this peer. Train on at our
   * own epoch until `noDonorRetryMs` has passed or the swarm moves further ahead.
   */
  #rememberNoDonor(swarmEpoch: number): void {
    const now = this.#now();
    this.#noDonor = { until: now + this.#noDonorRetryMs, swarmEpoch };
    // Said once per delay, not every time the swarm moves on and a new load finds nothing.
    if (now - this.#noDonorReportedAt < this.#noDonorRetryMs) return;
    this.#noDonorReportedAt = now;
    this.#emit({ type: "no-donor", epoch: this.#epoch, swarmEpoch, retryInMs: this.#noDonorRetryMs });
  }

  /**
   * The swarm is ahead and nobody can give newer state: readiness comes from the peers at our own
   * epoch; we average with them, or step alone when nobody else is at it.
   */
  async #stepAtOwnEpoch(signal: AbortSignal | undefined): Promise<boolean> {
    const view = this.#progress.at(this.#epoch);
    if (view.samplesAccumulated < view.targetBatchSize) return false;
    const alone = view.peersAtEpoch <= 1;
    if (alone && this.#accumulator.samples <= 0) return false;
    return this.#startRound(signal, alone);
  }

  /**
   * Hands the accumulated gradients to a round (or, `alone`, applies their own mean); with delayed
   * updates, moves on to the next epoch at once.
   */
  #startRound(signal: AbortSignal | undefined, alone: boolean): Promise<boolean> {
    const epoch = this.#epoch;
    const round = this.#accumulator;
    this.#accumulator = this.#spare;
    this.#spare = round;
    if (!this.#delayed) return this.#runRound(epoch, round, alone, signal);
    this.#epoch = epoch + 1;
    this.#averagingEpoch = epoch;
    this.#report();
    // #runRound undoes its own failures and reports them; a background round only rethrows an abort.
    this.#pending = this.#runRound(epoch, round, alone, signal)
      .then(
        () => undefined,
        () => undefined,
      )
      .finally(() => {
        this.#pending = null;
      });
    return Promise.resolve(true);
  }

  /**
   * Averages `round`'s gradients for `epoch` (or, `alone`, takes their own mean) and applies the
   * result; undoes the round if it fails.
   */
  async #runRound(
    epoch: number,
    round: GradientAccumulator,
    alone: boolean,
    signal: AbortSignal | undefined,
  ): Promise<boolean> {
    const revision = this.#revision;
    const localSamples = round.samples;
    let result: AveragedVector;
    try {
      result = alone
        ? { vector: round.mean(), groupSize: 1, totalWeight: localSamples }
        : await this.#averager.average(epoch, round.mean(), localSamples, signal);
      this.#checkAveraged(result);
    } catch (error) {
      if (revision === this.#revision) {
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
    if (revision !== this.#revision) return false;
    const gradient = this.#gradient;
    gradient.set(result.vector);
    const gradientNorm = l2Norm(gradient);
    if (this.#clipNorm !== undefined && gradientNorm > this.#clipNorm) {
      const scale = this.#clipNorm / gradientNorm;
      for (let i = 0; i < gradient.length; i++) gradient[i] = (gradient[i] ?? 0) * scale;
    }
    const learningRate = warmupLearningRate(this.#baseRate, this.#warmupSteps, epoch);
    this.#optimizer.step(this.#parameters, gradient, learningRate);
    this.#runSamples += result.totalWeight;
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
      shared: !alone && (totalWeight > localSamples || result.soleTrainer === true),
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
      generation: this.#generation,
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

function checkCount(value: number, what: string): void {
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new SwarmError(SwarmErrorCode.MALFORMED_MESSAGE, `${what} ${value} is not an integer ≥ 0`);
  }
}

function throwIfAborted(signal: AbortSignal | undefined, cause?: unknown): void {
  if (signal?.aborted !== true) return;
  if (isSwarmError(cause, SwarmErrorCode.ABORTED)) throw cause;
  throw new SwarmError(SwarmErrorCode.ABORTED, "the collaborative step was cancelled", {
    cause: cause ?? signal.reason,
  });
}
