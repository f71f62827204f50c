import type { Database } from "@barnraise/prisma";
import { RateLimiterPrisma, RateLimiterRes } from "rate-limiter-flexible";
import { AppError, AppErrorCode } from "../app-error.ts";

/**
 * Per-client rate limits for the routes that anyone can hit without an account (sign-up, join, the
 * public dashboard's reads) and for model uploads.
 * Counters live in the database (rate-limiter-flexible's Prisma store, table RateLimitCounter), so
 * every web instance behind a load balancer counts against one limit per client.
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

/** How often the counters whose window ended are deleted (each key's own row is reset on its next use). */
const SWEEP_INTERVAL_MS = 5 * 60_000;

/** The platform's rate limits on one database: `ctx.rateLimits`. */
export class RateLimits {
  readonly #db: Database;
  readonly #limiters = new Map<string, RateLimiterPrisma>();
  #nextSweep = 0;

  constructor(db: Database) {
    this.#db = db;
  }

  /**
   * Counts one request of `key` against limit `name` (with `points` per window instead of the
   * limit's default, when the platform's configuration says so); throws RATE_LIMITED (with
   * Retry-After) past the limit.
   */
  async consume(name: RateLimiterName, key: string, points: number = rateLimits[name].points): Promise<void> {
    this.#sweep();
    try {
      await this.#limiter(name, points).consume(key);
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

  #limiter(name: RateLimiterName, points: number): RateLimiterPrisma {
    const id = `${name}/${points}`;
    let found = this.#limiters.get(id);
    if (found === undefined) {
      found = new RateLimiterPrisma({
        storeClient: this.#db,
        // The client's accessor of model RateLimitCounter.
        tableName: "rateLimitCounter",
        keyPrefix: name,
        points,
        duration: rateLimits[name].durationSeconds,
        // Swept here instead, so that no timer outlives the database it was made for.
        clearExpiredByTimeout: false,
      });
      this.#limiters.set(id, found);
    }
    return found;
  }

  #sweep(): void {
    const now = Date.now();
    if (now < this.#nextSweep) return;
    this.#nextSweep = now + SWEEP_INTERVAL_MS;
    // Best effort: a failed sweep leaves rows that the next one deletes.
    this.#db.rateLimitCounter.deleteMany({ where: { expire: { lt: new Date(now) } } }).catch(() => undefined);
  }
}

/**
 * The client's address for rate limiting: the last entry of X-Forwarded-For, the one the reverse
 * proxy in front of the platform appended (or set) from the connection it accepted; `next start`
 * sets it from the socket when no proxy did. Earlier entries come from the client and could be
 * anything, so they are not trusted. "local" when the request came without one.
 */
export function clientIp(req: Request): string {
  const last = req.headers.get("x-forwarded-for")?.split(",").at(-1)?.trim();
  return last !== undefined && last.length > 0 ? last.slice(0, 64) : "local";
}
