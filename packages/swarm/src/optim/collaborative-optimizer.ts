import type { ExperimentConfig } from "@barnraise/protocol";
import { SwarmError, SwarmErrorCode, isSwarmError } from "../errors.ts";
import { stateDigest } from "../state/state-digest.ts";
import type { ParameterLayout } from "./parameter-layout.ts";
import type {
  AveragedVector,
  AveragerPort,
  EpochState,
  ProgressPort,
  StateHash,
  StatePort,
} from "./ports.ts";
import { createTrainingStrategy } from "./create-training-strategy.ts";
import type { StrategyRound, TrainingStrategy } from "./training-strategy.ts";

export interface CollaborativeOptimizerOptions {
  /**
   * Only `optimizer`, `training`, `averaging` and `compression` are read; without `compression`, no
   * error feedback is kept.
   */
  readonly config: Pick<ExperimentConfig, "optimizer" | "training" | "averaging"> &
    Partial<Pick<ExperimentConfig, "compression">>;
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
       * train (a group of one, or behind the swarm with nobody to hand over its state), or a private
       * step (see `treatSoloStepsAsPrivate`): those samples trained a model of this peer's own, and do
       * not count as a contribution.
       */
      readonly shared: boolean;
      readonly learningRate: number;
      /** L2 norm of the averaged vector (gradient, or DiLoCo's pseudo-gradient) before clipping. */
      readonly gradientNorm: number;
      /** Bytes this peer wrote on the wire in the step's all-reduce; absent when unknown. */
      readonly bytesSent?: number;
      /** The fingerprint of the parameters after the step (`stateDigest`): equal on every member. */
      readonly stateDigest: string;
      /** Steps in a row, this one included, applied with no other trainer's samples (0: it had some). */
      readonly soloSteps: number;
    }
  | {
      readonly type: "round-failed";
      readonly epoch: number;
      readonly localSamples: number;
      readonly error: unknown;
    }
  | {
      readonly type: "state-loaded";
      readonly epoch: number;
      readonly previousEpoch: number;
      /**
       * Why: the swarm was ahead (absent), or it held another version of this peer's own step, the
       * one most of it shares, which this peer took over (`swarm-state`).
       */
      readonly reason?: "swarm-state";
    }
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
 * The collaborative optimizer of DeDLOC §3.1: the peer trains at its own pace; once the swarm has the
 * target batch (the round's sample target) for the epoch, every peer averages its contribution
 * weighted by its samples, and all apply the same step to the same bits. What a minibatch does and
 * what a round averages is the experiment's strategy (`TrainingStrategy`): DeDLOC's accumulated
 * gradients and one large-batch optimizer step, or DiLoCo's local steps and an outer step on the
 * averaged pseudo-gradient. Stale or new peers catch up by downloading state from donors.
 *
 * Steps of the target size (DeDLOC): a minibatch that was mostly computed after the swarm reached
 * its target goes to the next step instead of the one forming (see `#ahead`), and a trainer already
 * averaging an epoch is not extrapolated any more in the swarm's estimate, so a step averages about
 * its target batch rather than the target plus whatever was in flight.
 *
 * With the "topk" codec it keeps error feedback: what the all-reduce did not carry of this peer's
 * contribution (weighted by its samples) is added to the next round's, so nothing is lost over rounds.
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
  readonly #strategy: TrainingStrategy;
  /**
   * Error feedback (with "topk"): Σ weight × (contribution − what the group received of it) over
   * past rounds, added back into the next round's contribution; undefined when the codec keeps all.
   */
  readonly #residual: Float32Array | undefined;
  /** How much of the residual carries into the next round (`compression.errorFeedbackDecay`). */
  readonly #feedbackDecay: number;
  readonly #progress: ProgressPort;
  readonly #averager: AveragerPort;
  readonly #state: StatePort;
  readonly #now: () => number;
  readonly #delayed: boolean;
  readonly #noDonorRetryMs: number;
  readonly #configVersion: number | undefined;
  readonly #listeners = new Set<CollaborativeOptimizerListener>();
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
  /** The fingerprint of the shared state and its epoch, computed when the state changes. */
  #stateHash: StateHash;
  /** The state this peer last found the swarm to hold another version of, and tried to take over. */
  #resyncedAt: StateHash | undefined;
  /** Steps in a row applied with no other trainer's samples in them. */
  #soloSteps = 0;
  /** While private solo steps run: the state before the first of them, the last one the swarm had. */
  #beforeSolo: EpochState | undefined;
  /** Whether a step with no other trainer's samples is this peer's own (see treatSoloStepsAsPrivate). */
  #soloIsPrivate: () => boolean = () => false;

  constructor(options: CollaborativeOptimizerOptions) {
    const { config, layout } = options;
    layout.check(options.parameters, "initial parameter vector");
    this.#layout = layout;
    this.#strategy = createTrainingStrategy(config, layout, options.parameters);
    this.#residual = config.compression?.method === "topk" ? new Float32Array(layout.size) : undefined;
    this.#feedbackDecay = config.compression?.errorFeedbackDecay ?? 1;
    this.#progress = options.progress;
    this.#averager = options.averager;
    this.#state = options.state;
    this.#now = options.now ?? Date.now;
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
    this.#stateHash = { epoch: 0, digest: stateDigest(this.#strategy.parameters) };
  }

  /**
   * The fingerprint of the shared state this peer holds (`stateDigest` of `parameters`) and the
   * epoch it belongs to: published with every progress record, so the aux can tell one model from two.
   */
  get stateHash(): StateHash {
    return this.#stateHash;
  }

  /** Steps in a row applied with no other trainer's samples in them (0 after a shared step or a load). */
  get soloSteps(): number {
    return this.#soloSteps;
  }

  /**
   * Says when a step with no other trainer's samples trains a model of this peer's own: asked at
   * each such step. A lone volunteer in touch with the swarm (its aux peer sees nobody else) steps
   * for the run, and says false; a peer cut off from a swarm that trains without it says true. The
   * state before the first private step is kept (a copy of the parameters and the optimizer state,
   * held until the peer shares a step again), so `dropSoloSteps` can go back to it, and its samples
   * are no contribution (the step event says `shared: false`). Default: no solo step is private.
   */
  treatSoloStepsAsPrivate(isPrivate: () => boolean): void {
    this.#soloIsPrivate = isPrivate;
  }

  /**
   * Drops the private steps this peer took alone (see `treatSoloStepsAsPrivate`) and goes back to
   * the state it held before them, the last one the swarm had: a peer cut off from a swarm that
   * trains on without it stops its private model, and when it gets back it catches up with the
   * swarm's state instead of offering its own. Returns the epoch it went back to, or undefined when
   * there were no private steps. A delayed round in flight is discarded.
   */
  dropSoloSteps(): number | undefined {
    const before = this.#beforeSolo;
    if (before === undefined || this.#soloSteps === 0) return undefined;
    this.importState(before);
    return before.epoch;
  }

  /**
   * The swarm's parameters θ, updated in place by each step and state load: the same bits on every
   * peer after each step. Evaluate and checkpoint these.
   */
  get parameters(): Float32Array {
    return this.#strategy.parameters;
  }

  /**
   * The parameters to compute the next gradients at, updated in place: θ itself with `dedloc`, this
   * peer's local copy with `diloco` (it moves with every minibatch).
   */
  get workingParameters(): Float32Array {
    return this.#strategy.workingParameters;
  }

  /** Changes whenever `workingParameters` change: the model reloads them when it does. */
  get workingVersion(): number {
    return this.#strategy.workingVersion;
  }

  /** The experiment's strategy: "dedloc" or "diloco". */
  get strategy(): TrainingStrategy["name"] {
    return this.#strategy.name;
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
    return this.#strategy.samples;
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

  /**
   * Adds one local minibatch (its mean gradient and size) and publishes the new progress. With
   * `diloco` this is an inner optimizer step on `workingParameters`.
   */
  accumulate(gradientMean: Float32Array, samples: number): void {
    if (this.#ahead(samples)) this.#strategy.accumulateAhead?.(gradientMean, samples);
    else this.#strategy.accumulate(gradientMean, samples);
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
   * Whether a minibatch of `samples` that just ended belongs to the step after the one forming, so
   * that a step averages its target batch rather than the target and every minibatch that was in
   * flight when the swarm reached it (DeDLOC's peers, each finishing its minibatch, overshot by
   * about half a minibatch per peer). It does when the swarm, this peer's own samples counted as
   * they are, has reached the target now, and had already at the minibatch's midpoint (the others'
   * records extrapolated back to it, half of this minibatch counted). The first condition is the one
   * `maybeStep` checks next, so a minibatch held back never leaves the swarm short of a step. Only
   * strategies whose minibatches can wait (`dedloc`) and progress ports that can look back take
   * part, and never at an epoch of this peer's own (the swarm ahead, no donor).
   */
  #ahead(samples: number): boolean {
    const progress = this.#progress;
    if (this.#strategy.accumulateAhead === undefined || progress.globalBefore === undefined) return false;
    if (this.#noDonor !== null) return false;
    this.#report(); // the estimate below counts this peer's own samples as they are
    const now = progress.global();
    if (now.epoch !== this.#epoch || now.samplesAccumulated < now.targetBatchSize) return false;
    const rate = this.#samplesPerSecond;
    const halfMs = rate > 0 ? (500 * samples) / rate : 0;
    const midpoint = progress.globalBefore(halfMs);
    return (
      midpoint.epoch === this.#epoch && midpoint.samplesAccumulated + samples / 2 >= midpoint.targetBatchSize
    );
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
      if (await this.#takeOverSharedState(signal)) return false;
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
      parameters: this.#strategy.parameters.slice(),
      optimizer: this.#strategy.exportOptimizer(),
      generation: this.#generation,
      samples: this.#runSamples,
      ...(this.#configVersion === undefined ? {} : { configVersion: this.#configVersion }),
    };
  }

  /**
   * Adopts `state` (copied), with its generation (absent: 0) and sample counter (absent: 0), and
   * drops the accumulated gradients (or local progress), which belong to another epoch, and the
   * error feedback. The epoch may go backwards (a
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
    this.#strategy.importState(state.parameters, state.optimizer);
    this.#residual?.fill(0);
    this.#epoch = state.epoch;
    this.#stateEpoch = state.epoch;
    this.#averagingEpoch = undefined;
    this.#revision += 1;
    this.#generation = state.generation ?? 0;
    this.#runSamples = state.samples ?? 0;
    this.#noDonor = null;
    this.#joined = true;
    this.#lastAccumulateAt = undefined;
    this.#stateHash = { epoch: state.epoch, digest: stateDigest(this.#strategy.parameters) };
    this.#soloSteps = 0;
    this.#beforeSolo = undefined;
    this.#report();
  }

  /**
   * One run, one model: when other trainers hold another state at this peer's own step (a peer that
   * stepped alone once, or took a lone peer's state, and averages with the others since, stays
   * apart for good: the same update applied to other bits), the version held by most of them wins
   * (the smaller digest on a tie, so both sides agree), and the peers of the others take it over
   * from its holders. Looked at once per state; Moshpit grid steps are never compared. Returns true
   * when the state was replaced.
   */
  async #takeOverSharedState(signal: AbortSignal | undefined): Promise<boolean> {
    const mine = this.#stateHash;
    const state = this.#state;
    if (mine.grid === true || state.loadShared === undefined || this.#progress.sharedStates === undefined) {
      return false;
    }
    if (this.#resyncedAt?.epoch === mine.epoch && this.#resyncedAt.digest === mine.digest) return false;
    const others = this.#progress.sharedStates(mine.epoch);
    const count = (digest: string) => (others.get(digest)?.length ?? 0) + (digest === mine.digest ? 1 : 0);
    let winner = mine.digest;
    for (const digest of others.keys()) {
      const better = count(digest) > count(winner) || (count(digest) === count(winner) && digest < winner);
      if (better) winner = digest;
    }
    if (winner === mine.digest) return false;
    this.#resyncedAt = mine;
    const previousEpoch = this.#epoch;
    const revision = this.#revision;
    try {
      const loaded = await state.loadShared(mine.epoch, winner, this.#generation, signal);
      if (loaded === null || revision !== this.#revision || (loaded.generation ?? 0) !== this.#generation) {
        return false;
      }
      this.importState(loaded);
      this.#emit({ type: "state-loaded", epoch: this.#epoch, previousEpoch, reason: "swarm-state" });
      return true;
    } catch (error) {
      throwIfAborted(signal, error);
      this.#emit({ type: "state-load-failed", epoch: this.#epoch, error });
      return false;
    }
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
    if (alone && this.#strategy.samples <= 0) return false;
    return this.#startRound(signal, alone);
  }

  /**
   * Hands what the strategy took in to a round (or, `alone`, applies it as it is); with delayed
   * updates, moves on to the next epoch at once.
   */
  #startRound(signal: AbortSignal | undefined, alone: boolean): Promise<boolean> {
    const epoch = this.#epoch;
    // The samples about to be averaged go out at once (a new averaging epoch publishes promptly):
    // the group's reducers hold this peer's weight against what its records announced.
    this.#averagingEpoch = epoch;
    this.#report();
    const round = this.#strategy.take();
    if (!this.#delayed) return this.#runRound(epoch, round, alone, signal);
    this.#epoch = epoch + 1;
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
   * Averages `round`'s contribution for `epoch` (or, `alone`, takes it as it is) and applies the
   * result; undoes the round if it fails.
   */
  async #runRound(
    epoch: number,
    round: StrategyRound,
    alone: boolean,
    signal: AbortSignal | undefined,
  ): Promise<boolean> {
    const revision = this.#revision;
    const localSamples = round.samples;
    const feedback =
      this.#residual === undefined ? undefined : withFeedback(round, this.#residual, this.#feedbackDecay);
    let result: AveragedVector;
    try {
      const input = feedback?.input ?? round.vector;
      result = alone
        ? { vector: input, groupSize: 1, totalWeight: localSamples }
        : await this.#averager.average(
            epoch,
            input,
            localSamples,
            signal,
            feedback === undefined ? undefined : { residual: feedback.unsent },
          );
      this.#checkAveraged(result);
    } catch (error) {
      if (revision === this.#revision) {
        round.restore();
        this.#epoch = epoch;
        this.#averagingEpoch = undefined;
        this.#report();
        this.#emit({ type: "round-failed", epoch, localSamples, error });
      } else {
        round.discard();
      }
      throwIfAborted(signal, error);
      return false;
    }
    if (revision !== this.#revision) {
      round.discard();
      return false;
    }
    // Alone, everything was applied: nothing is left over. Otherwise keep what was not sent.
    if (feedback !== undefined && this.#residual !== undefined) {
      feedback.keep(this.#residual, alone || result.soleTrainer === true);
    }
    const othersIn = !alone && result.soleTrainer !== true && result.totalWeight > localSamples;
    const privateStep = !othersIn && this.#soloIsPrivate();
    // The first private step: keep the state before it, the swarm's last (see dropSoloSteps).
    if (!privateStep) this.#beforeSolo = undefined;
    else this.#beforeSolo ??= this.exportState();
    const { learningRate, norm } = round.apply(result.vector, epoch);
    this.#runSamples += result.totalWeight;
    this.#stateEpoch = epoch + 1;
    this.#stateHash = {
      epoch: epoch + 1,
      digest: stateDigest(this.#strategy.parameters),
      // Moshpit's grid rounds average within different groups: their bits differ across the swarm.
      ...((result.rounds ?? 1) > 1 ? { grid: true } : {}),
    };
    this.#soloSteps = othersIn ? 0 : this.#soloSteps + 1;
    this.#epoch = epoch + 1;
    this.#averagingEpoch = undefined;
    if (!this.#delayed) this.#lastAccumulateAt = undefined; // the averaging time is not training time
    const { groupSize, totalWeight } = result;
    // Told before the new epoch is published, so that the first record of the next epoch already
    // carries what listeners add about this one (the bytes the round sent).
    this.#emit({
      type: "step",
      epoch: epoch + 1,
      groupSize,
      totalWeight,
      localSamples,
      shared: !alone && !privateStep && (totalWeight > localSamples || result.soleTrainer === true),
      learningRate,
      gradientNorm: norm,
      ...(result.bytesSent === undefined ? {} : { bytesSent: result.bytesSent }),
      stateDigest: this.#stateHash.digest,
      soloSteps: this.#soloSteps,
    });
    this.#report();
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
      samplesAccumulated: this.#strategy.samples,
      samplesPerSecond: this.#samplesPerSecond,
      ...(this.#averagingEpoch === undefined ? {} : { averagingEpoch: this.#averagingEpoch }),
      generation: this.#generation,
      stateHash: this.#stateHash,
      soloSteps: this.#soloSteps,
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

/**
 * Error feedback for one round (SparseLoCo's e ← β·e + Δ): the input is the contribution plus
 * `decay` × the residual carried over, per sample (the residual is kept weighted, so a round with
 * more or fewer samples than the last still adds back what was left out); `unsent` receives, from
 * the all-reduce, what the group did not receive of the input; `keep` stores it weighted for the
 * next round. With decay 1 nothing is lost over rounds but the last residual.
 */
function withFeedback(
  round: StrategyRound,
  residual: Float32Array,
  decay: number,
): { input: Float32Array; unsent: Float32Array; keep: (into: Float32Array, allApplied: boolean) => void } {
  const weight = round.samples;
  const input = round.vector.slice();
  if (weight > 0) {
    for (let i = 0; i < input.length; i++) {
      input[i] = (input[i] ?? 0) + ((residual[i] ?? 0) / weight) * decay;
    }
  }
  const unsent = new Float32Array(input.length);
  return {
    input,
    unsent,
    keep: (into, allApplied) => {
      if (weight <= 0) return; // nothing of ours was in the round
      if (allApplied) {
        into.fill(0);
        return;
      }
      for (let i = 0; i < into.length; i++) into[i] = (unsent[i] ?? 0) * weight;
    },
  };
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
