/**
 * Refusals between members, remembered for a while: the passes this node refused (an aux reports
 * them to the platform, so a volunteer's page can say why the swarm does not count a node), and the
 * peers that refused this node's pass (so a volunteer's status line says "refused by the swarm: …"
 * instead of "peers online 1"). A peer appears at most once, with its latest refusal; one that shows
 * a valid pass later is forgotten.
 */

export interface Refusal {
  /** The other side's PeerId. */
  readonly peer: string;
  /** The stable code of the refusal (a ProtocolError code such as PASS_REVOKED). */
  readonly code: string;
  /** What was wrong, in words. */
  readonly reason: string;
  /** Unix ms of the latest refusal. */
  readonly at: number;
}

export interface RefusalLogOptions {
  /** Most peers remembered; the oldest refusal goes first. Default 256. */
  readonly maxPeers?: number;
  /** Refusals older than this are dropped. Default 10 minutes. */
  readonly keepMs?: number;
  readonly now?: () => number;
}

export class RefusalLog {
  readonly #maxPeers: number;
  readonly #keepMs: number;
  readonly #now: () => number;
  /** In insertion order, so the first entry is the oldest refusal. */
  readonly #byPeer = new Map<string, Refusal>();

  constructor(options: RefusalLogOptions = {}) {
    this.#maxPeers = options.maxPeers ?? 256;
    this.#keepMs = options.keepMs ?? 10 * 60_000;
    this.#now = options.now ?? Date.now;
  }

  /** Remembers that `peer` was refused now, or refused this node now; `reason` is kept printable. */
  record(peer: string, code: string, reason: string): void {
    this.#byPeer.delete(peer);
    this.#byPeer.set(peer, {
      peer,
      code: printable(code, 64),
      reason: printable(reason, MAX_REASON),
      at: this.#now(),
    });
    while (this.#byPeer.size > this.#maxPeers) {
      const oldest = this.#byPeer.keys().next();
      if (oldest.done === true) break;
      this.#byPeer.delete(oldest.value);
    }
  }

  /** The latest refusal of or by `peer` still kept, if any. */
  of(peer: string): Refusal | undefined {
    const refusal = this.#byPeer.get(peer);
    if (refusal === undefined || refusal.at < this.#now() - this.#keepMs) return undefined;
    return refusal;
  }

  /** The peer showed a valid pass since: its refusal no longer holds. */
  forget(peer: string): void {
    this.#byPeer.delete(peer);
  }

  /** Refusals within the last `withinMs` (default: all kept), newest first. */
  recent(withinMs: number = this.#keepMs): Refusal[] {
    const since = this.#now() - Math.min(withinMs, this.#keepMs);
    const kept: Refusal[] = [];
    for (const [peer, refusal] of this.#byPeer) {
      if (refusal.at < this.#now() - this.#keepMs) this.#byPeer.delete(peer);
      else if (refusal.at >= since) kept.push(refusal);
    }
    return kept.reverse();
  }
}

/** The longest reason kept, in UTF-16 code units (what the platform's heartbeat takes). */
export const MAX_REASON = 512;

/**
 * A refusal's text may come from another peer: control characters become U+FFFD, so it cannot
 * move a volunteer's cursor or forge log lines, and it is cut to `max` code units without
 * splitting a surrogate pair.
 */
function printable(text: string, max: number): string {
  let cut = text.replace(/\p{Cc}/gu, "\uFFFD").slice(0, max);
  if (/[\uD800-\uDBFF]$/.test(cut)) cut = cut.slice(0, -1);
  return cut;
}
