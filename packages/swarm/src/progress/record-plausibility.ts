import type { ProgressRecord } from "./progress-messages.ts";

/**
 * How far above the other trainers' throughput (`referenceRateOf`) a trainer's record may claim, or
 * its samples grow per second: 64×, room for a GPU volunteer beside CPU ones (an H100 against a
 * laptop core is tens of times, not thousands), while a claim of 2^47 samples or 10^9 samples/s is
 * refused.
 */
export const PLAUSIBLE_RATE_RATIO = 64;
/**
 * How many epochs past where the swarm is (see `swarmEpochOf`) a record may be: the swarm's next epoch, and
 * room for records that cross (a relay that has not heard the latest ones yet, delayed updates one
 * ahead). A forged lead of 4 steps harms nothing.
 */
export const MAX_EPOCH_LEAD = 4;
/** Fewest other trainers' records a record is judged against. */
export const MIN_REFERENCES = 2;
/** A record's samples may grow by the throughput bound times the time since its last one plus this. */
const GAIN_SLACK_MS = 5_000;
/** How much a contributed total may exceed the samples announced for the steps it counts. */
const EARNED_SLACK = 1.25;
/** What a sender seen for the first time (or in a new session) may have accumulated: this much time's worth. */
const FIRST_RECORD_WINDOW_MS = 30_000;

/** The sender's previous accepted record and when it arrived, on the receiver's clock. */
export interface PreviousRecord {
  readonly record: ProgressRecord;
  readonly receivedAt: number;
}

export interface PlausibilityContext {
  /** The sender's previous accepted record of the same session, if it is still alive. */
  readonly previous: PreviousRecord | undefined;
  /**
   * The sender's latest accepted record of the same session however old (kept while its later
   * records are refused): the base its contributed total may grow from.
   */
  readonly lastAccepted?: PreviousRecord | undefined;
  /**
   * Fresh records of the other trainers (not the sender, not aux) of the record's generation, the
   * receiver's own included when it is a trainer.
   */
  readonly others: readonly ProgressRecord[];
  /**
   * The epoch of the swarm's state the receiver itself holds (an aux: the state it serves; a
   * trainer: the state it loaded), of the record's generation: the swarm has been there at least,
   * whatever the other records say. Trainers that just started (all of them, after the swarm
   * resumed from a checkpoint) report epoch 0 until they load the state.
   */
  readonly knownEpoch?: number | undefined;
  /** Now, on the receiver's clock (Unix ms). */
  readonly now: number;
  /**
   * The samples the sender announced for its latest epochs in this session (Σ over them, this
   * record's included): what its contributed total (`samplesTotal`) may have grown by since its
   * previous record, as each collaborative step adds the samples it put in.
   */
  readonly announcedSamples: number;
}

/**
 * Why a trainer's record cannot be true, or undefined when nothing in it is implausible. A valid
 * pass makes a volunteer a member, not a witness: the counters a record claims are held against
 * what the other trainers report and what the sender itself reported before.
 * - its epoch and step at most MAX_EPOCH_LEAD past where the swarm is (`swarmEpochOf`: the state the
 *   receiver holds, or where most other trainers are if further; a forged future step would
 *   otherwise become the run's step on the loss curve);
 * - its throughput at most PLAUSIBLE_RATE_RATIO times the other trainers' (`referenceRateOf`);
 * - its samples and minibatches of the epoch grown, since its previous record, by no more than that
 *   throughput bound allows in the time between them (a sender first seen: in 30 s);
 * - its contributed total (`samplesTotal`, the leaderboard's credit) grown by no more than the
 *   samples it announced for its latest epochs, with 25 % of slack. A total first seen is taken as
 *   it is: the session may have run long before this receiver heard of it.
 * Nothing is checked against fewer than MIN_REFERENCES other trainers: one member alone, the hostile one
 * perhaps, is never the yardstick of another (a lone honest trainer beside an attacker would
 * otherwise be refused by the aux). A trainer counts its own record among them, so two honest
 * trainers check a third; a lie that passes still meets the reducers' weight check and the
 * platform's bounds.
 */
export function implausibility(record: ProgressRecord, context: PlausibilityContext): string | undefined {
  const { others, previous, now, announcedSamples } = context;
  if (others.length < MIN_REFERENCES) return undefined;
  const swarmEpoch = swarmEpochOf(others, context.knownEpoch);
  const highest = Math.max(record.epoch, record.step);
  if (highest > swarmEpoch + MAX_EPOCH_LEAD) {
    return `epoch ${highest} is past the swarm's ${swarmEpoch} (at most ${MAX_EPOCH_LEAD} ahead)`;
  }
  const reference = referenceRateOf(others);
  if (!(reference > 0)) return undefined;
  const rateBound = PLAUSIBLE_RATE_RATIO * reference;
  if (record.samplesPerSecond > rateBound) {
    return `${round(record.samplesPerSecond)} samples/s is over ${PLAUSIBLE_RATE_RATIO}× the other trainers' (${round(rateBound)} at most)`;
  }
  const sameEpoch = previous !== undefined && previous.record.epoch === record.epoch;
  const windowMs = previous === undefined ? FIRST_RECORD_WINDOW_MS : Math.max(0, now - previous.receivedAt);
  const allowed = (rateBound * (windowMs + GAIN_SLACK_MS)) / 1000;
  const samplesGain = record.samplesAccumulated - (sameEpoch ? previous.record.samplesAccumulated : 0);
  if (samplesGain > allowed) {
    return `${samplesGain} more samples in ${round(windowMs / 1000)} s is over the throughput bound (${Math.floor(allowed)} at most)`;
  }
  const base = context.lastAccepted ?? previous;
  if (base !== undefined && record.samplesTotal !== undefined) {
    const totalGain = record.samplesTotal - (base.record.samplesTotal ?? 0);
    const sinceMs = Math.max(0, now - base.receivedAt);
    const earned = EARNED_SLACK * announcedSamples + (rateBound * (sinceMs + GAIN_SLACK_MS)) / 1000;
    if (totalGain > earned) {
      return `${totalGain} more contributed samples is over what it announced (${Math.floor(earned)} at most)`;
    }
  }
  // Every minibatch holds at least one sample.
  const minibatchGain = record.minibatches - (sameEpoch ? previous.record.minibatches : 0);
  if (minibatchGain > allowed) {
    return `${minibatchGain} more minibatches in ${round(windowMs / 1000)} s is over the throughput bound (${Math.floor(allowed)} at most)`;
  }
  return undefined;
}

/**
 * Where the swarm is, for the epoch bound: a receiver that holds the swarm's state (`knownEpoch`
 * past 0: an aux serving it, a trainer that loaded it) takes the upper median of the other trainers
 * at or past that state, and never less than the state. A maximum would let colluding keys climb
 * without end, taking turns: each claims the other's epoch plus the lead, and that becomes the next
 * reference (two keys, 4 epochs a record each). The trainers behind the state are left out, as they
 * are still loading it and say nothing of where the swarm is (after a resume most of them are at 0
 * while the first to load are past the checkpoint). A receiver with no state yet (a fresh run's
 * aux, a trainer that just started) knows nothing better than the others' maximum.
 */
function swarmEpochOf(others: readonly ProgressRecord[], knownEpoch: number | undefined): number {
  const known = knownEpoch ?? 0;
  if (!(known > 0)) return Math.max(0, ...others.map((other) => other.epoch));
  const current = others.map((other) => other.epoch).filter((epoch) => epoch >= known);
  return Math.max(known, upperMedian(current));
}

/**
 * The throughput a record is held against: the upper median of the other trainers that report one.
 * A maximum would let colluding keys compound, taking turns: each claims 64× the other's last claim,
 * which then becomes the next reference. Trainers that report none yet (just started, loading state)
 * are left out, so that they never make an honest record look implausible; with two references the
 * upper median is the larger, and a fast GPU volunteer is held against the CPU ones only through the
 * 64× room.
 */
function referenceRateOf(others: readonly ProgressRecord[]): number {
  return upperMedian(others.map((other) => other.samplesPerSecond).filter((rate) => rate > 0));
}

/** The upper median: a value no more than half of `values` exceed; 0 for none. */
function upperMedian(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? 0;
}

/** The lower median: the value at least half of `values` reach (a minority above cannot raise it). */
export function lowerMedian(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor((sorted.length - 1) / 2)] ?? 0;
}

function round(value: number): number {
  return Math.round(value * 100) / 100;
}
