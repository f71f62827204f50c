import type { Logger } from "pino";

/** What the helper needs from the swarm (ports; tests fake them). */
export interface AveragingHelperPorts {
  /** The swarm's progress as this node estimates it. */
  global(): { epoch: number; samplesAccumulated: number; targetBatchSize: number };
  /** Publishes this node's progress: an aux reports the epoch it is about to help average. */
  report(epoch: number): void;
  /** Joins the round of `epoch` in aux mode: reduces parts for others, weight 0. */
  average(epoch: number, vector: Float32Array, signal: AbortSignal): Promise<{ groupSize: number }>;
}

export interface AveragingHelperOptions extends AveragingHelperPorts {
  readonly logger: Logger;
  /** A monotonic clock in ms (default `performance.now`). */
  readonly now?: () => number;
}

/**
 * How long after the aux's round of an epoch ended the swarm may still be at that epoch before the
 * aux takes it as the trainers' retry and joins it: a round whose other parts failed (a member died
 * mid-round) is retried by the trainers within seconds, while a round that succeeded for them moves
 * their records to the next epoch at once.
 */
export const RETRY_AFTER_MS = 2_000;
/** The most times the aux joins the trainers' retries of an epoch after its own round of it ended. */
export const MAX_RETRIES_JOINED = 2;

/**
 * The aux averaging helper (DESIGN §6, DeDLOC I.2 "CPU helpers"): when the swarm reaches the target
 * batch for an epoch, it announces that epoch and joins the all-reduce in aux mode, so it reduces a
 * share of the parts with weight 0 and the trainers upload less each. It needs the length of the
 * parameter vector, which it learns from the first state it sees (`setVectorLength`). Each epoch is
 * helped once it succeeds, and again after the swarm went back to an older state (`forgetFrom`); a
 * failed round is logged at debug and the helper joins the trainers' retry of it (behind NAT, the
 * aux may be the only member that can reduce). A round can also succeed for the aux and fail for
 * the trainers (a part another member reduced broke): while the swarm is still at that epoch
 * RETRY_AFTER_MS after the aux's round ended, the aux joins the retry too (at most
 * MAX_RETRIES_JOINED times), so that the round the trainers complete is one the aux witnessed.
 */
export class AveragingHelper {
  readonly #options: AveragingHelperOptions;
  #zeros: Float32Array | null = null;
  #lastHelped = -1;
  #busy = false;
  #rounds = 0;
  /** When the aux's latest round of `#lastHelped` ended, and how many retries of it it joined. */
  #endedAt = -Infinity;
  #retriesJoined = 0;

  constructor(options: AveragingHelperOptions) {
    this.#options = options;
  }

  #now(): number {
    return (this.#options.now ?? (() => performance.now()))();
  }

  /** Whether a round is being helped now (the node's record then names that round's epoch). */
  get busy(): boolean {
    return this.#busy;
  }

  /** Rounds helped so far. */
  get rounds(): number {
    return this.#rounds;
  }

  setVectorLength(length: number): void {
    if (!Number.isSafeInteger(length) || length < 1) throw new RangeError(`bad vector length ${length}`);
    if (this.#zeros?.length !== length) this.#zeros = new Float32Array(length);
  }

  /**
   * The swarm went back to the state of `epoch` (it resumed from a checkpoint, or was rolled back):
   * its rounds from there on are helped again.
   */
  forgetFrom(epoch: number): void {
    this.#lastHelped = Math.min(this.#lastHelped, epoch - 1);
  }

  /** Joins the current epoch's round if the swarm is ready for it and it was not helped yet. */
  async maybeHelp(signal: AbortSignal): Promise<void> {
    const zeros = this.#zeros;
    if (zeros === null || this.#busy) return;
    const global = this.#options.global();
    if (global.samplesAccumulated < global.targetBatchSize) return;
    const now = this.#now();
    const retry =
      global.epoch === this.#lastHelped &&
      this.#retriesJoined < MAX_RETRIES_JOINED &&
      now - this.#endedAt >= RETRY_AFTER_MS;
    if (global.epoch <= this.#lastHelped && !retry) return;
    const epoch = global.epoch;
    const helpedBefore = this.#lastHelped;
    this.#busy = true;
    this.#lastHelped = epoch;
    this.#retriesJoined = retry ? this.#retriesJoined + 1 : 0;
    try {
      this.#options.report(epoch);
      const outcome = await this.#options.average(epoch, zeros, signal);
      this.#rounds += 1;
      this.#options.logger[this.#rounds === 1 ? "info" : "debug"](
        { epoch, groupSize: outcome.groupSize },
        "helped average",
      );
    } catch (error) {
      if (signal.aborted) throw error;
      // The trainers retry a failed round under the same epoch; help them with the retry.
      if (!retry) this.#lastHelped = helpedBefore;
      this.#options.logger.debug({ epoch, err: error }, "could not help with the round");
    } finally {
      this.#endedAt = this.#now();
      this.#busy = false;
    }
  }
}
