import type { AccessPass, AccessPassVerifier } from "@barnraise/protocol";
import type { Logger } from "pino";
import { SwarmError, SwarmErrorCode } from "../errors.ts";
import { unrefTimer } from "../time/unref-timer.ts";

export interface PassHolderOptions {
  /** The pass from the join response. */
  initial: string;
  passes: AccessPassVerifier;
  /** Fetches a fresh pass from the platform (the peer re-joins with its token). */
  refresh: () => Promise<string>;
  logger: Logger;
  now?: () => number;
  /** Refresh when this fraction of the pass's lifetime has passed; default 0.75. */
  refreshAt?: number;
  /** First retry delay after a failed refresh; doubles up to a minute. */
  retryMs?: number;
}

/**
 * Holds this node's access pass and renews it before it expires (DESIGN §3: passes are short-lived
 * and refreshed automatically). A failed refresh is retried with backoff while the current pass is
 * still valid; `onExpired` listeners hear when it could not be renewed in time. After the
 * experiment's authority key was rotated (the verifier trusts a new key), `renewIfOutdated` fetches
 * a pass of the new key at once, and asks again, with backoff, for as long as a refresh brings one
 * of the key replaced (the platform rotated while it answered).
 */
export class PassHolder {
  readonly #options: PassHolderOptions;
  readonly #now: () => number;
  #pass: AccessPass;
  #timer: NodeJS.Timeout | undefined;
  #retryMs: number;
  #running = false;
  #inFlight: Promise<AccessPass> | undefined;
  readonly #expiredListeners = new Set<(error: SwarmError) => void>();

  constructor(options: PassHolderOptions) {
    this.#options = options;
    this.#now = options.now ?? Date.now;
    this.#pass = options.passes.verify(options.initial, { now: this.#now() });
    this.#retryMs = options.retryMs ?? 1_000;
  }

  get pass(): AccessPass {
    return this.#pass;
  }

  token(): string {
    return this.#pass.token;
  }

  start(): void {
    this.#running = true;
    this.#schedule();
  }

  stop(): void {
    this.#running = false;
    clearTimeout(this.#timer);
  }

  onExpired(listener: (error: SwarmError) => void): () => void {
    this.#expiredListeners.add(listener);
    return () => this.#expiredListeners.delete(listener);
  }

  /** Fetches and installs a new pass now; a call while a refresh is in flight waits for that one. */
  refreshNow(): Promise<AccessPass> {
    this.#inFlight ??= this.#refresh().finally(() => {
      this.#inFlight = undefined;
    });
    return this.#inFlight;
  }

  /**
   * Fetches a new pass at once when the one held is not signed by the authority's current key (the
   * node just followed a rotation of the key); does nothing otherwise. Failures are retried with
   * the usual backoff.
   */
  renewIfOutdated(): void {
    if (!this.#running || this.#inFlight !== undefined || !this.#outdated()) return;
    this.#options.logger.info("fetching an access pass of the experiment's new authority key");
    this.#schedule(0);
  }

  async #refresh(): Promise<AccessPass> {
    const token = await this.#options.refresh();
    const pass = this.#options.passes.verify(token, { now: this.#now() });
    if (pass.username !== this.#pass.username && this.#pass.username !== "") {
      this.#options.logger.warn(
        { from: this.#pass.username, to: pass.username },
        "pass now names another user",
      );
    }
    this.#pass = pass;
    this.#options.logger.debug(
      { expiresAt: new Date(pass.expiresAt).toISOString() },
      "access pass refreshed",
    );
    if (this.#outdated()) {
      // Fetched while the key was being rotated: ask again soon, backing off.
      this.#schedule(this.#backoff());
    } else {
      this.#retryMs = this.#options.retryMs ?? 1_000;
      this.#schedule();
    }
    return pass;
  }

  /** Whether the pass held is signed by a key the authority replaced. */
  #outdated(): boolean {
    return !this.#options.passes.signedByCurrentKey(this.#pass.token);
  }

  /** The next retry delay: doubles per call up to a minute, reset by a refresh that brings a current pass. */
  #backoff(): number {
    const retry = this.#retryMs;
    this.#retryMs = Math.min(this.#retryMs * 2, 60_000);
    return retry;
  }

  #schedule(delayMs?: number): void {
    if (!this.#running) return;
    clearTimeout(this.#timer);
    const { issuedAt, expiresAt } = this.#pass;
    const due = issuedAt + (expiresAt - issuedAt) * (this.#options.refreshAt ?? 0.75);
    const wait = delayMs ?? Math.max(0, due - this.#now());
    this.#timer = setTimeout(() => void this.#run(), Math.min(wait, 2 ** 31 - 1));
    unrefTimer(this.#timer);
  }

  async #run(): Promise<void> {
    try {
      // Installing the pass schedules the next refresh.
      await this.refreshNow();
    } catch (cause) {
      const left = this.#pass.expiresAt - this.#now();
      const error = new SwarmError(
        SwarmErrorCode.PASS_REFRESH_FAILED,
        `could not refresh the access pass (${String(cause)}); it expires in ${Math.round(left / 1000)} s`,
        { cause },
      );
      this.#options.logger.warn({ err: cause, expiresInMs: left }, "access pass refresh failed");
      if (left <= 0) for (const listener of this.#expiredListeners) listener(error);
      this.#schedule(this.#backoff());
    }
  }
}
