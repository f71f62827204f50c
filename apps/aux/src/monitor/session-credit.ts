import type { ProgressRecord } from "@barnraise/swarm";
import type { WitnessStatus } from "./round-witness.ts";

/** What `SessionCredit` asks of the rounds this aux reduced (see `RoundWitness`). */
export interface WitnessPort {
  status(epoch: number, peerId: string, since: number): WitnessStatus;
  /** The samples the aux accepted into the round of `epoch`; undefined when it kept none. */
  samples(epoch: number): number | undefined;
}

/** A trainer's total that grew by more than the aux accepted of its samples in the rounds between. */
export interface CreditShortfall {
  /** What the trainer's contributed total grew by. */
  readonly claimed: number;
  /** What this aux accepted of its samples in those rounds. */
  readonly witnessed: number;
  /** The rounds (epochs averaged) the growth came from. */
  readonly from: number;
  readonly to: number;
}

/** Samples credited so far, by how they were checked. */
export interface CreditTally {
  /** Held against the weights this aux accepted in the rounds. */
  witnessed: number;
  /** From rounds this aux did not take part in: taken as the records' plausibility bounds allow. */
  unwitnessed: number;
  /** Claimed but not credited: more than this aux accepted. */
  cut: number;
}

/**
 * The most round epochs one growth of a total is held against (the witness keeps as many): a growth
 * over more rounds than that cannot be checked.
 */
const MAX_RANGE = 256;
/** Round changes kept while they wait for the witness. */
const MAX_WAITING = 64;

interface Waiting {
  /** The epoch of the trainer's latest finished round (its record's `round.epoch`). */
  readonly round: number;
  /** Its contributed total in the first record that named that round. */
  raw: number;
}

/**
 * The samples one trainer session is credited on the leaderboard: its self-reported contributed
 * total (`samplesTotal`), each growth held against what this aux accepted of its samples into the
 * rounds that growth came from (DESIGN §3: credit for samples that went into accepted steps).
 *
 * A trainer adds a round's samples to its total when the round ends, and names the round
 * (`round.epoch`) in its records. Each time the named round changes, the growth since the last
 * accounted total is attributed to the rounds after the last accounted one (a round named again, or
 * an earlier one after a resume, stands for itself alone), and is credited up to the sum of the
 * trainer's weights the aux saw in those rounds, each round once. A round the aux did not take part
 * in (`unwitnessed`) cannot be checked, and a growth that includes one is credited as claimed: the
 * records' own plausibility bounds are then all there is. Rounds the aux is yet to see (`pending`)
 * hold the growth back until it has. The first total seen of a session is taken as it is (the
 * session may have run long before this aux heard of it; the platform bounds it by the run's pace),
 * and a round that began before the aux heard of the session is not one the session was in
 * (the session's round of that epoch went unwitnessed).
 *
 * Costs to an honest trainer: none in rounds the aux reduced (its total grows by exactly the weight
 * it sent). A round whose reduction by the aux was cut short (the aux excluded it for a stream that
 * broke) credits nothing for that round; so do the rounds the swarm averaged again after it went back
 * to an older state, until the aux knows it did (`RoundWitness.forgetFrom`): they have the epochs of
 * rounds the aux saw.
 */
export class SessionCredit {
  readonly #peerId: string;
  /** When the session's first record was received (this aux's clock). */
  readonly #since: number;
  #credited: number;
  /** The largest total accounted so far, and the round it was accounted at. */
  #accountedRaw: number;
  #accountedRound: number;
  readonly #waiting: Waiting[] = [];
  /** Rounds whose witnessed weight was credited, so that a round is credited once. */
  readonly #used = new Set<string>();

  /** `since`: when `first`, the session's first record this aux saw, was received. */
  constructor(peerId: string, first: ProgressRecord, since: number) {
    this.#peerId = peerId;
    this.#since = since;
    const total = first.samplesTotal ?? 0;
    this.#credited = total;
    this.#accountedRaw = total;
    this.#accountedRound = first.round?.epoch ?? first.epoch - 1;
  }

  /** The samples credited to the session so far. */
  get samples(): number {
    return this.#credited;
  }

  /** Takes a later record of the session. */
  observe(record: ProgressRecord): void {
    const round = record.round?.epoch;
    if (round === undefined) return;
    const total = record.samplesTotal ?? 0;
    const last = this.#waiting.at(-1);
    const current = last?.round ?? this.#accountedRound;
    if (round === current) return;
    if (this.#waiting.length >= MAX_WAITING) {
      // Held back that long, only by claims of rounds ahead of the swarm: keep the newest.
      const dropped = this.#waiting.pop();
      this.#waiting.push({ round, raw: Math.max(total, dropped?.raw ?? 0) });
      return;
    }
    this.#waiting.push({ round, raw: total });
  }

  /**
   * Accounts the round changes the witness can decide now, in order; adds what was credited,
   * witnessed or not, and what was cut to `tally`. Returns the shortfalls found.
   */
  settle(witness: WitnessPort, tally: CreditTally): CreditShortfall[] {
    const shortfalls: CreditShortfall[] = [];
    while (this.#waiting.length > 0) {
      const next = this.#waiting[0] as Waiting;
      const from =
        next.round > this.#accountedRound
          ? Math.max(this.#accountedRound + 1, next.round - MAX_RANGE + 1)
          : next.round;
      let allowance = 0;
      let unchecked = next.round - this.#accountedRound > MAX_RANGE;
      const rounds: string[] = [];
      let decided = true;
      for (let epoch = from; epoch <= next.round; epoch++) {
        const status = witness.status(epoch, this.#peerId, this.#since);
        if (status.kind === "pending") {
          decided = false;
          break;
        }
        if (status.kind === "unwitnessed") unchecked = true;
        if (status.kind === "witnessed" && !this.#used.has(status.round)) {
          allowance += status.weight;
          rounds.push(status.round);
        }
      }
      if (!decided) break;
      this.#waiting.shift();
      const growth = Math.max(0, next.raw - this.#accountedRaw);
      const credited = unchecked ? growth : Math.min(growth, allowance);
      for (const round of rounds) this.#used.add(round);
      this.#forgetUsedBefore(from - MAX_RANGE);
      this.#credited += credited;
      this.#accountedRaw = Math.max(this.#accountedRaw, next.raw);
      this.#accountedRound = next.round;
      if (unchecked) tally.unwitnessed += credited;
      else tally.witnessed += credited;
      if (credited < growth) {
        tally.cut += growth - credited;
        shortfalls.push({ claimed: growth, witnessed: allowance, from, to: next.round });
      }
    }
    return shortfalls;
  }

  #forgetUsedBefore(epoch: number): void {
    if (this.#used.size <= 2 * MAX_RANGE) return;
    for (const round of this.#used) {
      if (Number(round.slice(0, round.indexOf("/"))) < epoch) this.#used.delete(round);
    }
  }
}
