import DataLoader from "dataloader";

/**
 * Group commit: callers that arrive while the database is busy with one batch of their kind wait for
 * it and then go together in the next one. A lone caller goes at once (on the next turn of the event
 * loop); under load, each statement serves every caller that arrived during the previous one, so the
 * database's cost per caller falls as the load rises, and no caller waits for a timer.
 *
 * `run` receives the batched inputs in arrival order and returns one result (or Error, which rejects
 * only that caller) per input, in the same order. Inputs are neither cached nor deduplicated: each
 * `load` is its own caller, and a caller never gets the answer of a batch that started before it
 * asked.
 */
export function groupCommit<I, O>(
  run: (inputs: readonly I[]) => Promise<readonly (O | Error)[]>,
  options: { maxBatchSize: number },
): DataLoader<I, O> {
  let running = 0;
  let waiting: (() => void)[] = [];
  return new DataLoader<I, O>(
    async (inputs) => {
      running += 1;
      try {
        return await run(inputs);
      } finally {
        running -= 1;
        if (running === 0) {
          const next = waiting;
          waiting = [];
          for (const dispatch of next) dispatch();
        }
      }
    },
    {
      cache: false,
      maxBatchSize: options.maxBatchSize,
      batchScheduleFn: (dispatch) => {
        if (running > 0) waiting.push(dispatch);
        else setImmediate(dispatch);
      },
    },
  );
}
