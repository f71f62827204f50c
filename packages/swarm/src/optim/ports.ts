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
   * With delayed parameter updates: the epoch whose round runs in the background while `epoch` is
   * accumulated, so the round's leader still counts this peer in (absent when no round runs).
   */
  readonly averagingEpoch?: number;
}

/** The swarm's view: the highest epoch seen, the samples accumulated for it, the target and an ETA. */
export interface GlobalProgressView {
  readonly epoch: number;
  readonly samplesAccumulated: number;
  readonly targetBatchSize: number;
  readonly etaSeconds: number;
}

export interface ProgressPort {
  /** Publish this peer's progress toward the current epoch's target. */
  report(progress: LocalProgressReport): void;
  /** The swarm's view: the highest epoch seen and whether the target batch size is reached for it. */
  global(): GlobalProgressView;
}

/** The result of one averaging round. */
export interface AveragedVector {
  /** The group's weighted mean, as long as the input. */
  readonly vector: Float32Array;
  readonly groupSize: number;
  /** Sum of the members' weights (samples). */
  readonly totalWeight: number;
}

export interface AveragerPort {
  /** Weighted all-reduce of `vector` with this peer's `weight` (its samples); resolves with the group's
   *  weighted mean. Rejects with a SwarmError when the round fails; the input is left untouched. */
  average(epoch: number, vector: Float32Array, weight: number, signal?: AbortSignal): Promise<AveragedVector>;
}

/** Parameters and optimizer state at an epoch, as state sharing hands them over. */
export interface EpochState {
  readonly epoch: number;
  readonly parameters: Float32Array;
  readonly optimizer: OptimizerState;
}

export interface StatePort {
  /** Parameters + optimizer state from up-to-date peers, or null when no donor is ahead of `epoch`. */
  loadNewer(epoch: number, signal?: AbortSignal): Promise<EpochState | null>;
}
