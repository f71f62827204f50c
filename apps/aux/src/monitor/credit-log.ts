import type { Logger } from "pino";
import type { ImplausibleRecords } from "./implausible-records.ts";
import type { StepAggregator } from "./step-aggregator.ts";

/** How often the credit tally is logged. */
const TALLY_EVERY_MS = 60_000;
/** Trainers whose shortfalls are counted at once. */
const MAX_COUNTED = 256;

/**
 * What the credit check found, told to the organizer: each trainer whose contributed total grew by
 * more than this aux accepted of its samples is logged and flagged on the manage page like a sender
 * of implausible records (with the evidence), and once a minute the samples credited so far are
 * logged by how they were checked (held against witnessed weights, unwitnessed, cut).
 */
export class CreditLog {
  readonly #logger: Logger;
  readonly #counts = new Map<string, number>();
  #loggedAt: number | undefined;

  constructor(logger: Logger) {
    this.#logger = logger;
  }

  report(
    aggregator: Pick<StepAggregator, "takeShortfalls" | "creditTally">,
    implausible: Pick<ImplausibleRecords, "record">,
    now: number,
  ): void {
    for (const shortfall of aggregator.takeShortfalls()) {
      const count = (this.#counts.get(shortfall.peerId) ?? 0) + 1;
      this.#counts.delete(shortfall.peerId);
      this.#counts.set(shortfall.peerId, count);
      if (this.#counts.size > MAX_COUNTED) this.#counts.delete(this.#counts.keys().next().value as string);
      const rounds =
        shortfall.from === shortfall.to
          ? `round ${shortfall.to}`
          : `rounds ${shortfall.from}–${shortfall.to}`;
      const reason =
        `its contributed total grew by ${shortfall.claimed} samples over ${rounds}, ` +
        `but this aux accepted ${shortfall.witnessed} of its samples into them`;
      implausible.record({ peerId: shortfall.peerId, reason, count });
      this.#logger.warn({ peer: shortfall.peerId, ...shortfall }, `credited less than claimed: ${reason}`);
    }
    this.#loggedAt ??= now;
    if (now - this.#loggedAt < TALLY_EVERY_MS) return;
    this.#loggedAt = now;
    const tally = aggregator.creditTally();
    this.#logger.info(
      tally,
      `credit so far: ${tally.witnessed} samples held against the rounds this aux reduced, ` +
        `${tally.unwitnessed} from rounds it did not see, ${tally.cut} claimed and not credited`,
    );
  }
}
