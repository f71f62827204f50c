import type { ImplausibleRecord } from "@barnraise/swarm";

/** A trainer whose progress records this aux refused as implausible, as the heartbeat reports it. */
export interface ImplausibleReport {
  readonly peerId: string;
  /** Why its latest refused record could not be true. */
  readonly reason: string;
  /** Its records refused by this aux so far. */
  readonly count: number;
  /** When the latest was refused (this aux's clock). */
  readonly at: number;
}

/**
 * A trainer's claim this aux refused: a record the swarm's tracker found implausible, or a
 * contributed total that outgrew what this aux accepted of its samples (see `CreditLog`).
 */
export type RefusedClaim = Pick<ImplausibleRecord, "peerId" | "reason" | "count"> &
  Partial<Pick<ImplausibleRecord, "username">>;

/** Senders kept at most: the ones refused most recently. */
const MAX_SENDERS = 256;
/** The longest reason kept. */
const MAX_REASON = 512;

/**
 * The trainers whose progress records this aux refused as implausible (a claim no trainer could
 * make: see the swarm's record plausibility) or whose contributed totals outgrew what this aux
 * accepted of their samples (`CreditLog`), the latest refusal of each. The heartbeat reports
 * those of the last minute, and the organizer's manage page flags the nodes with the evidence.
 */
export class ImplausibleRecords {
  readonly #now: () => number;
  /** In order of their latest refusal, the oldest first. */
  readonly #bySender = new Map<string, ImplausibleReport>();

  constructor(now: () => number = Date.now) {
    this.#now = now;
  }

  record(refused: RefusedClaim): void {
    this.#bySender.delete(refused.peerId);
    this.#bySender.set(refused.peerId, {
      peerId: refused.peerId,
      reason: refused.reason.slice(0, MAX_REASON),
      count: refused.count,
      at: this.#now(),
    });
    while (this.#bySender.size > MAX_SENDERS) {
      const oldest = this.#bySender.keys().next();
      if (oldest.done === true) break;
      this.#bySender.delete(oldest.value);
    }
  }

  /** The senders refused within the last `withinMs`, the most recent first. */
  recent(withinMs: number): ImplausibleReport[] {
    const since = this.#now() - withinMs;
    return [...this.#bySender.values()].filter((report) => report.at >= since).reverse();
  }
}
