import type { HeldOutScore } from "@barnraise/models";
import { setTimeout as sleep } from "node:timers/promises";
import type { Logger } from "pino";

/** Scores a state's parameters on the dataset's test split (the peer's model and data code). */
export interface HeldOutScorer {
  score(parameters: Float32Array, signal: AbortSignal): Promise<HeldOutScore>;
  /**
   * The mean loss over the split's first `maxBatches` batches (a fixed subset); +Infinity when it
   * is not finite.
   */
  loss(
    parameters: Float32Array,
    signal: AbortSignal,
    options: { readonly maxBatches: number },
  ): Promise<number>;
  /** Frees the model. */
  dispose(): void;
}

/** What the evaluator uses of a scorer. */
export type CheckpointScorer = Pick<HeldOutScorer, "score" | "dispose">;

/** Where the evaluator gets its scorer and where it sends the scores (ports; tests fake them). */
export interface CheckpointEvaluatorPorts {
  /** Builds the scorer (backend, model, the dataset's manifest); asked again after a failure. */
  openScorer(signal: AbortSignal): Promise<CheckpointScorer>;
  /** Records the score of checkpoint `checkpointId` on the platform. */
  report(checkpointId: string, score: HeldOutScore, signal: AbortSignal): Promise<void>;
}

export interface CheckpointEvaluatorOptions extends CheckpointEvaluatorPorts {
  readonly logger: Logger;
  /** Whether a failed report may succeed if sent again (the platform was unreachable or busy). */
  readonly retryable?: (error: unknown) => boolean;
  /** The waits before each new attempt at a report that failed retryably; default 2, 5 and 10 s. */
  readonly retryDelaysMs?: readonly number[];
  /** The aux's stop: cuts the evaluation in flight short (between batches) and starts no other. */
  readonly signal: AbortSignal;
}

/** A checkpoint the platform accepted, and the parameters it holds. */
export interface EvaluationTarget {
  readonly checkpointId: string;
  readonly step: number;
  readonly parameters: Float32Array;
}

/**
 * The aux's held-out evaluation (issue 17): scores each checkpoint the platform accepted on the
 * dataset's test split and records the score with the platform, which charts it beside the
 * training loss. One evaluation runs at a time, in the background: a checkpoint offered while one is
 * being scored waits, and a newer one replaces it, so the aux catches up with the newest state
 * instead of queueing work it can never finish on a slow machine. The scorer yields to the event
 * loop between batches, so the swarm and the checkpointer keep going meanwhile.
 *
 * Evaluation is a report, not part of the run: any failure (the model cannot be built, the dataset
 * cannot be read, the platform refuses the score) is logged as a warning and the aux goes on; the
 * scorer is built again for the next checkpoint when building it failed.
 */
export class CheckpointEvaluator {
  readonly #options: CheckpointEvaluatorOptions;
  #next: EvaluationTarget | undefined;
  #running: Promise<void> | undefined;
  #scorer: CheckpointScorer | undefined;

  constructor(options: CheckpointEvaluatorOptions) {
    this.#options = options;
  }

  /** Whether an evaluation is running. */
  get busy(): boolean {
    return this.#running !== undefined;
  }

  /** Evaluates `target` next, in place of any checkpoint still waiting. Returns at once; never throws. */
  offer(target: EvaluationTarget): void {
    if (this.#options.signal.aborted) return;
    const waiting = this.#next;
    if (waiting !== undefined) {
      this.#options.logger.debug(
        { step: waiting.step, newerStep: target.step },
        `skipping the evaluation of step ${waiting.step}: a newer checkpoint came first`,
      );
    }
    this.#next = target;
    if (this.#running === undefined) this.#start();
  }

  /** Resolves once no evaluation runs or waits (at once when idle). */
  async idle(): Promise<void> {
    while (this.#running !== undefined) await this.#running;
  }

  /** Waits for the evaluation in flight (abort the signal first to cut it short), then frees the model. */
  async close(): Promise<void> {
    await this.idle();
    this.#scorer?.dispose();
    this.#scorer = undefined;
  }

  #start(): void {
    this.#running = this.#drain().finally(() => {
      this.#running = undefined;
      // Offered after the loop looked for work but before this ran: start again.
      if (this.#next !== undefined && !this.#options.signal.aborted) this.#start();
    });
  }

  async #drain(): Promise<void> {
    for (let target = this.#take(); target !== undefined; target = this.#take()) {
      if (this.#options.signal.aborted) return;
      await this.#evaluate(target);
    }
  }

  #take(): EvaluationTarget | undefined {
    const target = this.#next;
    this.#next = undefined;
    return target;
  }

  async #evaluate(target: EvaluationTarget): Promise<void> {
    const { logger, signal } = this.#options;
    const { step, checkpointId } = target;
    try {
      this.#scorer ??= await this.#options.openScorer(signal);
      signal.throwIfAborted();
      const score = await this.#scorer.score(target.parameters, signal);
      signal.throwIfAborted();
      await this.#report(target, score);
      logger.info({ step, checkpointId, ...score }, "checkpoint evaluated");
    } catch (error) {
      if (signal.aborted) return;
      logger.warn(
        { step, checkpointId, err: error },
        `could not evaluate the checkpoint of step ${step} on the held-out split: ${describe(error)}; the aux goes on`,
      );
    }
  }

  /**
   * Sends the score; a retryable failure (the platform unreachable or busy) is sent again after
   * each of the retry delays, unless a newer checkpoint is waiting by then: its score replaces
   * this one on the chart's end anyway.
   */
  async #report(target: EvaluationTarget, score: HeldOutScore): Promise<void> {
    const { logger, signal } = this.#options;
    const delays = this.#options.retryDelaysMs ?? [2_000, 5_000, 10_000];
    for (let attempt = 0; ; attempt++) {
      try {
        await this.#options.report(target.checkpointId, score, signal);
        return;
      } catch (error) {
        const delay = delays[attempt];
        if (delay === undefined || this.#next !== undefined || !(this.#options.retryable?.(error) ?? false)) {
          throw error;
        }
        logger.debug(
          { step: target.step, err: error, retryInMs: delay },
          `could not record the evaluation of step ${target.step}: ${describe(error)}; trying again`,
        );
        await sleep(delay, undefined, { signal });
      }
    }
  }
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
