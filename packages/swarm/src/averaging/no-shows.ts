/** How long a member that missed a gathering it was expected at is not waited for, the first time. */
const FIRST_PAUSE_MS = 30_000;
/** The longest such pause, reached by doubling at each gathering missed in a row. */
const MAX_PAUSE_MS = 10 * 60_000;
/** Members remembered at most; the oldest is forgotten first. */
const MAX_REMEMBERED = 4096;

/**
 * Members a leader waited for in vain: expected by their progress records, they did not join the
 * gathering before its deadline. Each is not waited for during a pause (30 s, doubled at each
 * gathering missed in a row, at most 10 minutes), and waited for again as soon as it joins one.
 * A member that publishes records and never comes (a silent key, a frozen machine) so costs the
 * swarm one deadline, then fewer and fewer; it may still join any gathering that is open.
 */
export class NoShows {
  readonly #now: () => number;
  readonly #missed = new Map<string, { misses: number; until: number }>();

  constructor(options: { now?: () => number } = {}) {
    this.#now = options.now ?? Date.now;
  }

  /** `peer` was expected at a gathering that closed at its deadline without it. */
  missed(peer: string): void {
    const previous = this.#missed.get(peer);
    const misses = (previous?.misses ?? 0) + 1;
    const pauseMs = Math.min(MAX_PAUSE_MS, FIRST_PAUSE_MS * 2 ** (misses - 1));
    this.#missed.delete(peer);
    this.#missed.set(peer, { misses, until: this.#now() + pauseMs });
    if (this.#missed.size > MAX_REMEMBERED) {
      const oldest = this.#missed.keys().next().value;
      if (oldest !== undefined) this.#missed.delete(oldest);
    }
  }

  /** `peer` joined a gathering: it is waited for again. */
  joined(peer: string): void {
    this.#missed.delete(peer);
  }

  /** Whether `peer` is in its pause now: gatherings do not wait for it. */
  excused(peer: string): boolean {
    const entry = this.#missed.get(peer);
    return entry !== undefined && entry.until > this.#now();
  }
}
