import { joinPlatform, type JoinOptions } from "./join-client.ts";
import { JoinError, JoinErrorCode } from "./join-error.ts";
import type { JoinedExperiment } from "./join-response.ts";

/**
 * Joining when the platform may be down for a while (DESIGN §1: the peer retries and says so):
 * exponential backoff with jitter on retryable errors only. A refusal (bad token, banned, tampered
 * config …) is thrown at once, because asking again cannot change the answer.
 */

export const DEFAULT_INITIAL_DELAY_MS = 1_000;
export const DEFAULT_MAX_DELAY_MS = 30_000;

export interface JoinRetryOptions extends JoinOptions {
  /** Told before each wait: the attempt that failed (1 for the first), the wait, and why. */
  onRetry?: (attempt: number, delayMs: number, error: JoinError) => void;
  /** First wait; doubles after each failure up to `maxDelayMs`. Default 1 s. */
  initialDelayMs?: number;
  /** Default 30 s. A longer Retry-After from the server is honoured. */
  maxDelayMs?: number;
  /** Stop retrying when the next attempt would start later than this after the first; default never. */
  giveUpAfterMs?: number;
  /** Waits `ms`, rejecting when `signal` aborts; injected by tests. */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  /** Uniform in [0, 1), for the jitter; injected by tests. */
  random?: () => number;
  /** The single attempt; `joinPlatform` unless injected. */
  join?: (options: JoinOptions) => Promise<JoinedExperiment>;
}

/** Joins, retrying retryable failures with backoff. Throws the first non-retryable JoinError, or the last one. */
export async function joinWithRetry(options: JoinRetryOptions): Promise<JoinedExperiment> {
  const now = options.now ?? Date.now;
  const sleep = options.sleep ?? abortableSleep;
  const join = options.join ?? joinPlatform;
  const started = now();
  for (let attempt = 1; ; attempt++) {
    try {
      return await join(options);
    } catch (error) {
      if (!(error instanceof JoinError) || !error.retryable) throw error;
      const delayMs = retryDelayMs(attempt, error, options);
      if (options.giveUpAfterMs !== undefined && now() + delayMs - started > options.giveUpAfterMs) {
        throw error;
      }
      options.onRetry?.(attempt, delayMs, error);
      try {
        await sleep(delayMs, options.signal);
      } catch (cause) {
        throw new JoinError(JoinErrorCode.ABORTED, "the join was cancelled while waiting to retry", {
          cause,
        });
      }
    }
  }
}

/**
 * The wait after failed attempt `attempt` (1-based): nominal = initial · 2^(attempt−1), capped at
 * maxDelayMs, then "equal jitter" (uniform in [nominal/2, nominal]) so that peers restarted together
 * do not retry together. A server's Retry-After is a floor.
 */
export function retryDelayMs(
  attempt: number,
  error: JoinError,
  options: Pick<JoinRetryOptions, "initialDelayMs" | "maxDelayMs" | "random"> = {},
): number {
  const initial = options.initialDelayMs ?? DEFAULT_INITIAL_DELAY_MS;
  const max = options.maxDelayMs ?? DEFAULT_MAX_DELAY_MS;
  const nominal = Math.min(max, initial * 2 ** Math.min(attempt - 1, 30));
  const jittered = Math.round(nominal / 2 + (options.random ?? Math.random)() * (nominal / 2));
  return Math.max(jittered, error.retryAfterMs ?? 0);
}

/** setTimeout as a promise that rejects with the signal's reason on abort. */
export function abortableSleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted === true) {
      reject(signal.reason as Error);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason as Error);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
