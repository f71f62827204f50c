import { createHash } from "node:crypto";
import { mkdir, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { serializeTrainingState, type TrainingState } from "@barnraise/swarm";
import type { Logger } from "pino";

/** Where the checkpointer gets the swarm's state and where it sends it (ports; tests fake them). */
export interface CheckpointerPorts {
  /** Downloads the newest state at or after `minEpoch` from up-to-date trainers; rejects when none can give it. */
  downloadState(minEpoch: number, signal: AbortSignal): Promise<TrainingState>;
  upload(
    file: { path: string; sizeBytes: number; sha256: Uint8Array },
    meta: { step: number; loss?: number; generation: number },
    signal: AbortSignal,
  ): Promise<{ id: string; sha256: string }>;
}

export interface CheckpointerOptions extends CheckpointerPorts {
  /** Upload every this many collaborative steps (the experiment's `checkpoints.everySteps`). */
  readonly everySteps: number;
  /**
   * The run's last step (`training.maxSteps`), checkpointed whatever `everySteps` says: the trainers
   * stop there, and its state is the trained model.
   */
  readonly finalStep?: number | undefined;
  /** A directory of its own: files are staged here and removed after the upload. */
  readonly directory: string;
  readonly logger: Logger;
  /** Wait after a failed attempt before the next; default 10 s. */
  readonly retryDelayMs?: number;
  readonly now?: () => number;
  /**
   * Told of each state whose checkpoint the platform accepted, with the platform's record of it (the
   * aux then serves the state as a donor and evaluates it on the held-out split).
   */
  readonly onUploaded?: (state: TrainingState, checkpoint: { id: string; sha256: string }) => void;
}

/**
 * The aux checkpointer (DESIGN §6): every `everySteps` collaborative steps it downloads the latest
 * state from the trainers (hash-checked chunk by chunk by state sharing), serializes it, and uploads
 * the file to the platform, streamed, with its SHA-256 in the signed request. One checkpoint at a
 * time; a failed attempt is retried after a pause, and the staged file never outlives an attempt.
 */
export class Checkpointer {
  readonly #options: CheckpointerOptions;
  /** The step of the last uploaded checkpoint (0: none yet). */
  #lastStep = 0;
  #busy = false;
  #retryAt = 0;

  constructor(options: CheckpointerOptions) {
    if (!Number.isSafeInteger(options.everySteps) || options.everySteps < 1) {
      throw new RangeError(`everySteps must be a positive integer, got ${options.everySteps}`);
    }
    this.#options = options;
  }

  get lastStep(): number {
    return this.#lastStep;
  }

  /**
   * The run's state is now the one of `step` (a checkpoint the aux loaded, a resume or a rollback):
   * the next checkpoint is due `everySteps` after it.
   */
  resetTo(step: number): void {
    this.#lastStep = step;
  }

  /** Whether a checkpoint is due at the swarm's `step`: `everySteps` after the last, or the run's last step. */
  due(step: number): boolean {
    const { everySteps, finalStep } = this.#options;
    const now = (this.#options.now ?? Date.now)();
    if (this.#busy || now < this.#retryAt || step <= this.#lastStep) return false;
    if (finalStep !== undefined && step >= finalStep && this.#lastStep < finalStep) return true;
    return step >= everySteps && step - this.#lastStep >= everySteps;
  }

  /**
   * Takes a checkpoint if one is due at `step`; `loss` is the latest loss the monitor aggregated.
   * Resolves when done or failed (a failure is logged and retried later); rejects only on abort.
   */
  async maybeCheckpoint(step: number, loss: number | undefined, signal: AbortSignal): Promise<void> {
    if (!this.due(step)) return;
    this.#busy = true;
    const { directory, logger } = this.#options;
    const path = join(directory, `step-${step}-${process.pid}.ckpt`);
    try {
      const state = await this.#options.downloadState(step, signal);
      const bytes = serializeTrainingState(state);
      const sha256 = createHash("sha256").update(bytes).digest();
      await mkdir(directory, { recursive: true });
      await writeFile(path, bytes, { mode: 0o600 });
      const uploaded = await this.#options.upload(
        { path, sizeBytes: bytes.byteLength, sha256 },
        { step: state.epoch, generation: state.generation ?? 0, ...(loss === undefined ? {} : { loss }) },
        signal,
      );
      this.#lastStep = state.epoch;
      this.#options.onUploaded?.(state, uploaded);
      logger.info(
        { step: state.epoch, sha256: uploaded.sha256, sizeBytes: bytes.byteLength, id: uploaded.id },
        "checkpoint uploaded",
      );
    } catch (error) {
      if (signal.aborted) throw error;
      const delay = this.#options.retryDelayMs ?? 10_000;
      this.#retryAt = (this.#options.now ?? Date.now)() + delay;
      logger.warn(
        { step, err: error, retryInSeconds: delay / 1000 },
        `checkpoint of step ${step} failed; trying again in ${Math.round(delay / 1000)} s`,
      );
    } finally {
      await rm(path, { force: true });
      this.#busy = false;
    }
  }
}
