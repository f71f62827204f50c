import {
  loadLatestCheckpoint,
  type AttestedState,
  type PlatformClient,
  type Swarm,
  type TrainingState,
} from "@barnraise/swarm";
import type { Logger } from "pino";
import type { BackgroundTasks } from "../background-tasks.ts";

/** Wait before asking the platform again for the checkpoint to serve. */
const CHECKPOINT_RETRY_MS = 15_000;

export interface StateHolderOptions {
  readonly swarm: Swarm;
  readonly platform: PlatformClient;
  readonly logger: Logger;
  /** The run generation the aux follows now. */
  readonly generation: () => number;
  /** Told of each state it holds from now on (the averaging helper learns the model's size from it). */
  readonly onHeld: (state: TrainingState) => void;
  /** Told when the platform's latest checkpoint of the current generation became the state it holds. */
  readonly onLoaded: (latest: AttestedState) => void;
}

/**
 * The run's state this aux serves as a donor, so that a run survives all its trainers leaving (and
 * this aux restarting): the platform's latest checkpoint at start, then each checkpoint it uploads,
 * or the organizer's rollback checkpoint. A state of the same generation replaces the held one
 * only when it is newer.
 */
export class StateHolder {
  readonly #options: StateHolderOptions;
  #state: TrainingState | null = null;
  #loading = false;
  #retryAt = 0;

  constructor(options: StateHolderOptions) {
    this.#options = options;
  }

  /** The state served, or null while there is none. */
  get state(): TrainingState | null {
    return this.#state;
  }

  /** Serves `state` (from where it came, for the log) unless the held one is as new. */
  hold(state: TrainingState, from: string): void {
    const held = this.#state;
    if (held !== null && (held.generation ?? 0) === (state.generation ?? 0) && state.epoch <= held.epoch)
      return;
    this.#state = state;
    this.#options.onHeld(state);
    this.#options.logger.info(
      { step: state.epoch, generation: state.generation ?? 0 },
      `serving ${from} as the run's state`,
    );
  }

  /** Drops the state served (a rollback replaces it). */
  clear(): void {
    this.#state = null;
  }

  /**
   * While it holds nothing, asks the platform for the run's latest checkpoint (in the background,
   * again after CHECKPOINT_RETRY_MS when there is none or the request failed); and tells the swarm
   * which state it serves (its record's `stateEpoch`) unless `busy` (the averaging helper's record
   * names the round it helps).
   */
  tick(now: number, busy: boolean, signal: AbortSignal, background: BackgroundTasks): void {
    const { swarm, generation } = this.#options;
    if (this.#state === null && !this.#loading && now >= this.#retryAt) {
      this.#loading = true;
      background.run(
        loadLatestCheckpoint(this.#options.platform, signal)
          .then((latest) => {
            if (latest === null) {
              this.#retryAt = Date.now() + CHECKPOINT_RETRY_MS;
            } else if (latest.attestation.generation === generation()) {
              this.hold(latest.state, `the platform's checkpoint of step ${latest.state.epoch}`);
              this.#options.onLoaded(latest);
            }
          })
          .catch((error: unknown) => {
            this.#retryAt = Date.now() + CHECKPOINT_RETRY_MS;
            throw error;
          })
          .finally(() => {
            this.#loading = false;
          }),
      );
    }
    if (!busy && this.#state !== null) {
      swarm.progress.report({
        epoch: this.#state.epoch,
        samplesAccumulated: 0,
        samplesPerSecond: 0,
        bytesAggregated: swarm.averager.bytesAggregated,
        generation: generation(),
        stateEpoch: this.#state.epoch,
      });
    }
  }
}
