/**
 * Waits that never hang silently: each has a deadline, says every 10 s what it is still waiting for
 * and for how long, and on the deadline fails naming what did not happen. For the servers the run
 * starts and stops (global-setup.ts, support/web-server.ts); a test's own waits use Playwright's
 * timeouts.
 */

const NOTE_EVERY_MS = 10_000;

/** A line on the run's output, as the scripts' `[barnraise]` lines are. */
export function note(line: string): void {
  process.stderr.write(`[e2e] ${line}\n`);
}

export class DeadlineError extends Error {
  override readonly name = "DeadlineError";
}

/**
 * Resolves as `work` does; rejects with a DeadlineError when `ms` pass first, naming `what` (e.g.
 * "the OIDC provider to listen"). Meanwhile it notes every 10 s that it still waits. `work` itself is
 * not cancelled: the caller stops whatever it started.
 */
export async function within<T>(what: string, ms: number, work: Promise<T>): Promise<T> {
  const started = Date.now();
  let deadline: NodeJS.Timeout | undefined;
  const notes = setInterval(() => {
    note(`still waiting for ${what} (${Math.round((Date.now() - started) / 1000)} s of ${ms / 1000} s)`);
  }, NOTE_EVERY_MS);
  const expired = new Promise<never>((_resolve, reject) => {
    deadline = setTimeout(() => {
      reject(new DeadlineError(`waited ${ms / 1000} s for ${what}, and it did not happen`));
    }, ms);
  });
  try {
    return await Promise.race([work, expired]);
  } finally {
    clearTimeout(deadline);
    clearInterval(notes);
  }
}
