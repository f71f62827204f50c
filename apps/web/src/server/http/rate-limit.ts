import { RateLimiterMemory, RateLimiterRes } from "rate-limiter-flexible";
import { AppError, AppErrorCode } from "../app-error.ts";

/**
 * Per-client rate limits for the routes that anyone can hit without an account (sign-up, join, the
 * public dashboard's reads).
 * Counters live in this process's memory (rate-limiter-flexible's RateLimiterMemory): behind a load
 * balancer each instance allows its own share, which is the intended bound for abuse protection,
 * not an exact quota. Nothing else depends on these counters.
 */

export const rateLimits = {
  /** Self-service account creation, per client address (BARNRAISE_SIGNUP_LIMIT sets the points). */
  register: { points: 10, durationSeconds: 3600, what: "sign-ups" },
  /** Peer joins and pass refreshes, per client address (a peer refreshes its pass every few hours). */
  join: { points: 60, durationSeconds: 60, what: "join requests" },
  /**
   * The public dashboard's reads (metrics, leaderboard, checkpoints), per client address: a viewer
   * polls three routes every 5 s (36 a minute), so this serves a dozen viewers behind one address.
   */
  publicRead: { points: 600, durationSeconds: 60, what: "dashboard requests" },
  /** Model uploads, per signed-in user: each is validated, hashed and written whole. */
  modelUpload: { points: 60, durationSeconds: 3600, what: "model uploads" },
} as const;

export type RateLimiterName = keyof typeof rateLimits;

// Kept on globalThis so that Next's module reloading in development keeps the counters.
const holder = globalThis as typeof globalThis & {
  __barnraiseRateLimiters?: Map<RateLimiterName, RateLimiterMemory>;
};

function limiter(name: RateLimiterName, points: number): RateLimiterMemory {
  holder.__barnraiseRateLimiters ??= new Map();
  let found = holder.__barnraiseRateLimiters.get(name);
  if (found?.points !== points) {
    found = new RateLimiterMemory({ keyPrefix: name, points, duration: rateLimits[name].durationSeconds });
    holder.__barnraiseRateLimiters.set(name, found);
  }
  return found;
}

/**
 * Counts one request of `key` against limiter `name` (with `points` per window instead of the
 * limit's default, when the platform's configuration says so); throws RATE_LIMITED (with
 * Retry-After) past the limit.
 */
export async function consumeRateLimit(
  name: RateLimiterName,
  key: string,
  points: number = rateLimits[name].points,
): Promise<void> {
  try {
    await limiter(name, points).consume(key);
  } catch (error) {
    if (!(error instanceof RateLimiterRes)) throw error;
    const seconds = Math.max(1, Math.ceil(error.msBeforeNext / 1000));
    throw new AppError(
      AppErrorCode.RATE_LIMITED,
      `too many ${rateLimits[name].what} from this address; try again in ${seconds} s`,
      { headers: { "retry-after": String(seconds) } },
    );
  }
}

/** Forgets every counter: for tests that exercise a limit more than once in one process. */
export function resetRateLimits(): void {
  holder.__barnraiseRateLimiters?.clear();
}

/**
 * The client's address for rate limiting: the first hop of X-Forwarded-For (set by the reverse proxy
 * in front of the platform), or "local" when the request came without one.
 */
export function clientIp(req: Request): string {
  const first = req.headers.get("x-forwarded-for")?.split(",")[0]?.trim();
  return first !== undefined && first.length > 0 ? first.slice(0, 64) : "local";
}
