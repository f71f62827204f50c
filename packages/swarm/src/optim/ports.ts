import type { OptimizerState } from "./flat-optimizer.ts";

/**
 * What the collaborative optimizer needs from the rest of the engine. The node implements these over
 * the network (progress tracker, all-reduce, state sharing); tests fake them in one process.
 */

/** This peer's progress toward the current epoch's target batch. */
export interface LocalProgressReport {
  readonly epoch: number;
  readonly samplesAccumulated: number;
  readonly samplesPerSecond: number;
  /**
   * The epoch whose round this peer is in: announced with the round's samples just before they are
   * averaged (equal to `epoch` then), and, with delayed parameter updates, the round running in the
   * background while `epoch` is accumulated, so its leader still counts this peer in. Absent when no
   * round runs.
   */
  readonly averagingEpoch?: number;
  /** The run generation of this peer's state (absent means 0); peers ignore other generations. */
  readonly generation?: number;
  /**
   * The fingerprint of the shared state this peer holds (`stateDigest` of θ) and the epoch it
   * belongs to: the parameters after the step that reached `epoch` (under `diloco`, θ after the
   * outer step). Absent before the first state is known.
   */
  readonly stateHash?: StateHash;
  /**
   * Steps in a row this peer applied with no other trainer's samples in them (0 after a step
   * averaged with another trainer, or after loading the swarm's state).
   */
  readonly soloSteps?: number;
}

/**
 * The fingerprint of a peer's shared state (`stateDigest` of θ) and the epoch it belongs to. `grid`:
 * the step that led to it averaged over several Moshpit rounds, whose groups hold different bits
 * (digests of such a step say nothing about a split).
 */
export interface StateHash {
  readonly epoch: number;
  readonly digest: string;
  readonly grid?: boolean;
}

/** The swarm's view: the highest epoch seen, the samples accumulated for it, the target and an ETA. */
export interface GlobalProgressView {
  readonly epoch: number;
  readonly samplesAccumulated: number;
  readonly targetBatchSize: number;
  readonly etaSeconds: number;
}

/** One epoch's view as if it were the swarm's epoch (`ProgressPort.at`). */
export interface EpochProgressView extends GlobalProgressView {
  /** Trainers at this epoch, this peer included when it is at it. */
  readonly peersAtEpoch: number;
}

export interface ProgressPort {
  /** Publish this peer's progress toward the current epoch's target. */
  report(progress: LocalProgressReport): void;
  /** The swarm's view: the highest epoch seen and whether the target batch size is reached for it. */
  global(): GlobalProgressView;
  /**
   * The same view as it was `agoMs` milliseconds ago, by the records held now (their throughput
   * extrapolated to that moment). Lets the optimizer put a minibatch that was mostly computed after
   * the swarm reached its target into the next step; without it, every minibatch joins the step
   * that is forming.
   */
  globalBefore?(agoMs: number): GlobalProgressView;
  /**
   * The view of `epoch` as if it were the swarm's epoch: only the peers at it count. Used when the
   * swarm is ahead and nobody can hand this peer newer state, so it trains on at its own epoch.
   */
  at(epoch: number): EpochProgressView;
  /**
   * The digests other trainers of this peer's generation publish for their state at `epoch` (steps
   * of one group only, not Moshpit grids), each with the peers holding it; absent when unknown.
   */
  sharedStates?(epoch: number): ReadonlyMap<string, readonly string[]>;
}

/** The result of one averaging round. */
export interface AveragedVector {
  /** The group's weighted mean, as long as the input. */
  readonly vector: Float32Array;
  readonly groupSize: number;
  /** Sum of the members' weights (samples). */
  readonly totalWeight: number;
  /**
   * True when no other trainer was in the swarm: the vector is this peer's own, and its step is the
   * swarm's step (a lone volunteer trains the run's model).
   */
  readonly soleTrainer?: boolean;
  /** Bytes this peer wrote on the wire for the round; absent when unknown. */
  readonly bytesSent?: number;
  /** Averaging rounds the step took: more than one is a Moshpit grid (see StateHash.grid). */
  readonly rounds?: number;
}

export interface AverageOptions {
  /**
   * Error feedback: receives, element by element, what the group did not receive of `vector` (the
   * codec's loss on this peer's contribution). Its contents are unspecified when the round fails.
   */
  readonly residual?: Float32Array;
}

export interface AveragerPort {
  /** Weighted all-reduce of `vector` with this peer's `weight` (its samples); resolves with the group's
   *  weighted mean. Rejects with a SwarmError when the round fails; the input is left untouched. */
  average(
    epoch: number,
    vector: Float32Array,
    weight: number,
    signal?: AbortSignal,
    options?: AverageOptions,
  ): Promise<AveragedVector>;
}

/** Parameters and optimizer state at an epoch, as state sharing hands them over. */
export interface EpochState {
  readonly epoch: number;
  readonly parameters: Float32Array;
  readonly optimizer: OptimizerState;
  /** The run generation of the state's lineage; absent means 0. */
  readonly generation?: number;
  /** The run's sample counter (Σ total weight of applied steps); absent means 0. */
  readonly samples?: number;
  /** The experiment config version the state was trained under, when known. */
  readonly configVersion?: number;
}

export interface StatePort {
  /**
   * Parameters + optimizer state of run generation `generation` newer than `epoch` — from peers
   * ahead, else from the run's latest checkpoint — or null when nobody can give newer state.
   */
  loadNewer(epoch: number, generation: number, signal?: AbortSignal): Promise<EpochState | null>;
  /**
   * The state of the peers whose state at `epoch` has fingerprint `digest` (at `epoch` or later,
   * from them), or null when none can give it: how a peer whose state differs from the swarm's at
   * the same step takes the swarm's over. Absent when unsupported.
   */
  loadShared?(
    epoch: number,
    digest: string,
    generation: number,
    signal?: AbortSignal,
  ): Promise<EpochState | null>;
}
