/**
 * Waiting with a deadline. Every wait of the soak names what it waits for, so a run that hangs says
 * where; a wait past its deadline throws a WaitTimeout with that name.
 */

export class WaitTimeout extends Error {
  constructor(what: string, ms: number) {
    super(`timed out after ${Math.round(ms / 1000)} s waiting for ${what}`);
    this.name = "WaitTimeout";
  }
}

/** The soak was asked to stop (Ctrl-C) while it waited. */
export class Interrupted extends Error {
  constructor() {
    super("interrupted");
    this.name = "Interrupted";
  }
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted === true) {
      reject(new Interrupted());
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(new Interrupted());
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** Thrown by a probe to end the wait at once: what it waits for can no longer happen. */
export class StopWaiting extends Error {
  constructor(message: string) {
    super(message);
    this.name = "StopWaiting";
  }
}

export interface WaitOptions {
  readonly timeoutMs: number;
  readonly intervalMs?: number;
  readonly signal?: AbortSignal;
}

/**
 * Polls `probe` until it returns something other than undefined, for at most `timeoutMs`. A
 * rejection counts as "not yet", except StopWaiting, which ends the wait with that error.
 */
export async function waitFor<T>(
  what: string,
  probe: () => Promise<T | undefined> | T | undefined,
  options: WaitOptions,
): Promise<T> {
  const deadline = Date.now() + options.timeoutMs;
  for (;;) {
    let value: T | undefined;
    try {
      value = await probe();
    } catch (error) {
      if (error instanceof StopWaiting) throw error;
      value = undefined;
    }
    if (value !== undefined) return value;
    if (Date.now() >= deadline) throw new WaitTimeout(what, options.timeoutMs);
    await sleep(Math.min(options.intervalMs ?? 500, Math.max(0, deadline - Date.now())), options.signal);
  }
}
