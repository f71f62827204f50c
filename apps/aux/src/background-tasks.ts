import type { Logger } from "pino";

/**
 * The aux's work that runs beside its loop (a checkpoint, a round it helps, a report): a failure is
 * logged unless the aux is stopping, and `settle` waits for whatever is still running.
 */
export class BackgroundTasks {
  readonly #tasks = new Set<Promise<void>>();
  readonly #logger: Logger;
  readonly #signal: AbortSignal;

  constructor(logger: Logger, signal: AbortSignal) {
    this.#logger = logger;
    this.#signal = signal;
  }

  run(work: Promise<void>): void {
    const tracked = work.catch((error: unknown) => {
      if (!this.#signal.aborted) this.#logger.warn({ err: error }, "an aux task failed");
    });
    this.#tasks.add(tracked);
    void tracked.finally(() => this.#tasks.delete(tracked));
  }

  async settle(): Promise<void> {
    await Promise.all(this.#tasks);
  }
}
