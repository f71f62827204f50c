import { ProtocolError, ProtocolErrorCode } from "./errors.ts";

/**
 * Where seen nonces are kept. Peers keep them in memory; the platform keeps them in its database
 * so that several web instances share one window.
 */
export interface NonceStore {
  /**
   * Records `key` until `expiresAt` (ms). Returns false if `key` is already recorded and has not
   * expired. Must be atomic: of two concurrent calls with the same key, at most one returns true.
   */
  add(key: string, expiresAt: number, now: number): Promise<boolean>;
}

export interface ReplayGuardOptions {
  store: NonceStore;
  /** N: the largest accepted |time − now| of a signed request, in ms. Nonces are kept for 2N. */
  maxSkewMs: number;
}

/**
 * Rejects a signed request whose nonce was seen in the last 2N. Together with the clock-skew
 * check (|time − now| ≤ N) this refuses every replay: a copy arriving after 2N is outside the skew.
 */
export class ReplayGuard {
  readonly maxSkewMs: number;
  readonly #store: NonceStore;

  constructor(options: ReplayGuardOptions) {
    if (!(options.maxSkewMs > 0)) throw new RangeError("maxSkewMs must be positive");
    this.#store = options.store;
    this.maxSkewMs = options.maxSkewMs;
  }

  checkTime(time: number, now: number): void {
    if (Math.abs(time - now) > this.maxSkewMs) {
      throw new ProtocolError(
        ProtocolErrorCode.REQUEST_CLOCK_SKEW,
        `request time is ${Math.round((time - now) / 1000)} s from this clock; at most ${this.maxSkewMs / 1000} s is allowed`,
      );
    }
  }

  /** Records the nonce of an authenticated request, or throws REQUEST_REPLAYED. */
  async record(signer: string, nonce: string, now: number): Promise<void> {
    const fresh = await this.#store.add(`${signer}:${nonce}`, now + 2 * this.maxSkewMs, now);
    if (!fresh) {
      throw new ProtocolError(ProtocolErrorCode.REQUEST_REPLAYED, "request nonce was already used");
    }
  }
}

/**
 * In-memory nonce store, bounded in size. Expiry times grow with the clock, so the oldest entries
 * sit at the front of the insertion-ordered map and are swept from there.
 */
export class MemoryNonceStore implements NonceStore {
  readonly #entries = new Map<string, number>();
  readonly #maxEntries: number;

  constructor(options: { maxEntries?: number } = {}) {
    this.#maxEntries = options.maxEntries ?? 1_000_000;
  }

  get size(): number {
    return this.#entries.size;
  }

  add(key: string, expiresAt: number, now: number): Promise<boolean> {
    this.#sweep(now);
    const seen = this.#entries.get(key);
    if (seen !== undefined && seen > now) return Promise.resolve(false);
    if (this.#entries.size >= this.#maxEntries) {
      return Promise.reject(
        new ProtocolError(ProtocolErrorCode.REPLAY_STORE_FULL, "too many requests in the replay window"),
      );
    }
    this.#entries.delete(key);
    this.#entries.set(key, expiresAt);
    return Promise.resolve(true);
  }

  #sweep(now: number): void {
    for (const [key, expiresAt] of this.#entries) {
      if (expiresAt > now) break;
      this.#entries.delete(key);
    }
  }
}
