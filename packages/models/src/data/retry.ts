/**
 * Retrying with exponential backoff for downloads: transient failures (network errors, 5xx) are
 * tried again a few times; the caller decides which errors are transient.
 */
import { abortableSleep } from "@barnraise/swarm";

/** How often and how patiently to retry. */
export interface RetryPolicy {
  /** Total attempts, the first included (≥ 1). */
  readonly attempts: number;
  /** Delay before the second attempt; doubled for each further one. */
  readonly baseDelayMs: number;
  /** Upper bound on any single delay. */
  readonly maxDelayMs: number;
}

export const DEFAULT_RETRY_POLICY: RetryPolicy = { attempts: 5, baseDelayMs: 250, maxDelayMs: 8000 };

/** The error of the last attempt, after every attempt failed transiently. */
export class RetriesExhausted extends Error {
  override readonly name = "RetriesExhausted";
  readonly attempts: number;

  constructor(attempts: number, cause: unknown) {
    super(`failed ${attempts} times: ${describe(cause)}`, { cause });
    this.attempts = attempts;
  }
}

/**
 * Runs `operation` until it succeeds, it throws an error `isTransient` rejects (rethrown at once),
 * `signal` aborts (its reason is thrown), or the attempts run out (RetriesExhausted).
 */
export async function withRetry<T>(
  operation: (attempt: number) => Promise<T>,
  isTransient: (error: unknown) => boolean,
  policy: RetryPolicy,
  signal?: AbortSignal,
): Promise<T> {
  const attempts = Math.max(1, Math.floor(policy.attempts));
  for (let attempt = 1; ; attempt++) {
    signal?.throwIfAborted();
    try {
      return await operation(attempt);
    } catch (error) {
      if (signal?.aborted === true) throw signal.reason;
      if (!isTransient(error)) throw error;
      if (attempt >= attempts) throw new RetriesExhausted(attempt, error);
      const delay = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** (attempt - 1));
      // Jitter spreads the retries of many peers hitting one server after an outage.
      await abortableSleep(delay * (0.5 + Math.random() / 2), signal);
    }
  }
}

/** A one-line description of an error, with its cause when there is one. */
export function describe(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = error.cause instanceof Error ? ` (${error.cause.message})` : "";
  return `${error.message}${cause}`;
}
