import type { HeldOutScorer } from "./checkpoint-evaluator.ts";

/**
 * One held-out scorer for the aux's roles that score parameter vectors (the checkpoint evaluator
 * and the contribution validator). TF.js has one engine per process, and a model holds one vector
 * at a time while it scores it (between batches another score would overwrite it), so the roles
 * share one model and take turns: each score waits for the ones asked before it.
 *
 * `open` hands out a handle; the model is built by the first handle opened (and again after a
 * failed build, or after every handle was disposed), and freed when the last handle is disposed.
 */
export class SharedScorer {
  readonly #build: (signal: AbortSignal) => Promise<HeldOutScorer>;
  #model: Promise<HeldOutScorer> | undefined;
  #handles = 0;
  /** The end of the queue of scores. */
  #tail: Promise<unknown> = Promise.resolve();

  constructor(build: (signal: AbortSignal) => Promise<HeldOutScorer>) {
    this.#build = build;
  }

  /** A handle on the shared model; rejects when building it fails (the next `open` tries again). */
  async open(signal: AbortSignal): Promise<HeldOutScorer> {
    const building = (this.#model ??= this.#build(signal));
    let model: HeldOutScorer;
    try {
      model = await building;
    } catch (error) {
      if (this.#model === building) this.#model = undefined;
      throw error;
    }
    this.#handles += 1;
    let disposed = false;
    return {
      score: (parameters, scoreSignal) => {
        if (disposed) return Promise.reject(new Error("this scorer handle was disposed"));
        return this.#inTurn(() => model.score(parameters, scoreSignal));
      },
      loss: (parameters, lossSignal, options) => {
        if (disposed) return Promise.reject(new Error("this scorer handle was disposed"));
        return this.#inTurn(() => model.loss(parameters, lossSignal, options));
      },
      dispose: () => {
        if (disposed) return;
        disposed = true;
        this.#handles -= 1;
        if (this.#handles > 0) return;
        this.#model = undefined;
        // Freed once the scores already queued are done with it.
        void this.#inTurn(() => {
          model.dispose();
          return Promise.resolve();
        });
      },
    };
  }

  #inTurn<T>(work: () => Promise<T>): Promise<T> {
    const result = this.#tail.then(work);
    this.#tail = result.catch(() => undefined);
    return result;
  }
}
