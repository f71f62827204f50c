import type { PauseReason } from "@barnraise/protocol";
import type { PeerProgressRecord, ProgressRecord } from "@barnraise/swarm";
import { SessionCredit, type CreditShortfall, type CreditTally, type WitnessPort } from "./session-credit.ts";

/** One peer's cumulative contribution, for the platform's leaderboard. */
export interface PeerContribution {
  peerId: string;
  /** The peer's process run (from its records); absent for peers that send none. */
  session?: string;
  /**
   * Samples the peer put into collaborative steps in its session: with a witness, its reported total
   * held against the weights the aux accepted of it (see `SessionCredit`).
   */
  samples: number;
  /** Seconds spent computing gradients since the peer started. */
  computeSeconds: number;
  /** Bytes aggregated for others as a reducer. */
  bytesAggregated: number;
  /** Seconds since the peer's current session started. */
  sessionSeconds: number;
  /**
   * Trainers: whether the peer put samples into a collaborative step recently (see `averagingWindowMs`);
   * absent for aux peers and for trainers too new to tell.
   */
  averaging?: boolean;
}

/** One collaborative step as the monitor pushes it to the platform. */
export interface AggregatedStep {
  /** The step reached by averaging epoch `step − 1`. */
  step: number;
  /** Σ lossSum / Σ minibatches over the peers' totals for epoch `step − 1`. */
  loss: number;
  /** Σ samples/s over fresh trainer records when the step was collected. */
  samplesPerSecond: number;
  /** Fresh trainer records when the step was collected, less the trainers that are not averaging. */
  alivePeers: number;
  /** Unix ms when the step was collected. */
  time: number;
  /** Mean bytes each trainer sent in the step's all-reduce, over the trainers that said; absent when none did. */
  bytesPerPeer?: number;
  /** Σ compute seconds ÷ Σ wall seconds of the trainers in the step, in [0, 1]; absent when none said. */
  utilization?: number;
  /**
   * The samples that went into the step: Σ of the weights the aux accepted in the round that
   * averaged epoch `step − 1` (after the earned-weight check); absent when the aux did not reduce a
   * part of that round (it was starting, the round was a Moshpit grid's, or it does not help).
   */
  samples?: number;
  peers: PeerContribution[];
}

export interface StepAggregatorOptions {
  /** A record received longer ago than this is stale; a gap this long between records ends a session. */
  ttlMs: number;
  /** How long after the first record of a later epoch an epoch's totals are taken as complete. */
  graceMs: number;
  now?: () => number;
  /** Most epochs whose loss totals are kept at once; default 64. */
  maxEpochsKept?: number;
  /**
   * A trainer whose contributed samples have not grown for this long, or for three recent step
   * intervals if that is longer, is not averaging; default 2 minutes.
   */
  averagingWindowMs?: number;
  /**
   * The rounds this aux reduced a part of: a trainer's credit is then held against the weights it
   * accepted (`SessionCredit`); without one, a trainer's reported total is its credit.
   */
  witness?: WitnessPort;
}

/** A trainer whose contributed total grew by more than the aux accepted of its samples. */
export interface PeerShortfall extends CreditShortfall {
  readonly peerId: string;
}

interface PeerState {
  record: ProgressRecord;
  receivedAt: number;
  sessionStart: number;
  /** When the session's contributed samples (`samplesTotal`) last grew; undefined before they did. */
  contributedAt: number | undefined;
}

interface LossTotals {
  lossSum: number;
  minibatches: number;
  /** From a record's `previous` (the epoch's final totals): what the dashboard shows per step. */
  computeSeconds?: number | undefined;
  wallSeconds?: number | undefined;
  /** From a record's `round`: the bytes the peer sent in the epoch's all-reduce. */
  bytesSent?: number | undefined;
}

/** A first sighting of a trainer record at `epoch`, at local time `seenAt`. */
interface EpochSighting {
  epoch: number;
  seenAt: number;
}

/**
 * Turns the trainers' progress records into one aggregated metric per collaborative step (DeDLOC
 * Appendix I.2). Pure state: no timers; the caller feeds `observe` and polls `collect`.
 *
 * - Loss: per peer and epoch, the totals with the most minibatches seen are kept, from `record` and
 *   from `record.previous` (a short step may only show its totals in the next epoch's `previous`).
 *   Only trainer records (mode ≠ "aux") count for loss, epochs, samples/s and alive peers.
 * - Finality: epoch e is final once some fresh trainer record has an epoch > e and `graceMs` has
 *   passed since the aggregator first saw a trainer record with an epoch > e. A final epoch e is
 *   emitted as step e + 1 with loss Σ lossSum / Σ minibatches over the peers' totals for e. An epoch
 *   with Σ minibatches = 0 is marked done and not emitted. Each epoch is done at most once; data
 *   arriving later for a done epoch is ignored. Epochs before the epoch of the first trainer record
 *   observed are never emitted, not even from its `previous`. A jump (5 → 8) emits each epoch in between
 *   that has data.
 * - Traffic and utilization: the mean bytes each trainer sent in epoch e's all-reduce (its records'
 *   `round`), and Σ compute seconds ÷ Σ wall seconds from their final totals (`previous`) of e.
 * - `samplesPerSecond` is summed over fresh trainer records (received at most `ttlMs` ago) at `collect`
 *   time; `alivePeers` counts them less the trainers that are not averaging; `time` is now.
 * - Averaging: a trainer's `samplesTotal` counts only samples that went into collaborative steps, so
 *   a trainer whose total has not grown for the averaging window (`averagingWindowMs`, or three
 *   recent step intervals when that is longer) while its session is older than the window is not
 *   averaging: it trains alone or cannot reach the others. A session younger than the window is
 *   given the benefit of the doubt.
 * - `peers`: every peer with a fresh record (aux peers included, for their bytes aggregated) plus this
 *   node's own contribution, sorted by peer id. A peer's session starts at its first record and
 *   restarts when the gap between two of its records exceeds `ttlMs`.
 * - Bounded memory: loss totals for at most `maxEpochsKept` epochs (when over, the oldest epoch is
 *   marked done and dropped); peers not heard from for 10 × `ttlMs` are forgotten.
 */
export class StepAggregator {
  readonly #ttlMs: number;
  readonly #graceMs: number;
  readonly #now: () => number;
  readonly #maxEpochsKept: number;
  readonly #peers = new Map<string, PeerState>();
  /** Loss totals per epoch, then per peer; only for epochs ≥ #nextEpoch. */
  readonly #loss = new Map<number, Map<string, LossTotals>>();
  /** First sightings with strictly increasing epoch and time: earlier, smaller ones never matter. */
  readonly #sightings: EpochSighting[] = [];
  /** The lowest epoch not yet done; undefined before the first trainer record. */
  #nextEpoch: number | undefined;
  /** Only trainer records of this rollback generation count for steps and liveness. */
  #generation = 0;
  #own: PeerContribution | null = null;
  #latestLoss: number | undefined;
  readonly #averagingWindowMs: number;
  /** When the swarm reached each of its latest epochs (first sightings), for the step interval. */
  readonly #stepTimes: EpochSighting[] = [];
  readonly #witness: WitnessPort | undefined;
  readonly #tally: CreditTally = { witnessed: 0, unwitnessed: 0, cut: 0 };
  #shortfalls: PeerShortfall[] = [];
  /**
   * Trainer sessions' credit, by PeerId and session, in order of their latest record: kept longer
   * than the peers (a session silent for a while goes on from its checked credit, not from a
   * total taken as it comes).
   */
  readonly #credits = new Map<string, { peerId: string; credit: SessionCredit; seenAt: number }>();

  constructor(options: StepAggregatorOptions) {
    this.#ttlMs = checked(options.ttlMs, "ttlMs", (value) => value > 0);
    this.#graceMs = checked(options.graceMs, "graceMs", (value) => value >= 0);
    this.#maxEpochsKept = checked(
      options.maxEpochsKept ?? 64,
      "maxEpochsKept",
      (value) => Number.isInteger(value) && value > 0,
    );
    this.#averagingWindowMs = checked(
      options.averagingWindowMs ?? 120_000,
      "averagingWindowMs",
      (value) => value > 0,
    );
    this.#now = options.now ?? Date.now;
    this.#witness = options.witness;
  }

  /** Takes in one record accepted from a peer. */
  observe(update: PeerProgressRecord): void {
    const { peerId, record, receivedAt } = update;
    const known = this.#peers.get(peerId);
    if (known === undefined) this.#forgetGonePeers();
    const sameSession =
      known !== undefined &&
      receivedAt - known.receivedAt <= this.#ttlMs &&
      known.record.session === record.session;
    const contributed = record.samplesTotal ?? 0;
    const grew = sameSession ? contributed > (known.record.samplesTotal ?? 0) : contributed > 0;
    this.#observeCredit(peerId, record, receivedAt);
    this.#peers.set(peerId, {
      record,
      receivedAt,
      sessionStart: sameSession ? known.sessionStart : receivedAt,
      contributedAt: grew ? receivedAt : sameSession ? known.contributedAt : undefined,
    });
    if (record.mode === "aux" || (record.generation ?? 0) !== this.#generation) return;

    this.#nextEpoch ??= record.epoch;
    const last = this.#sightings.at(-1);
    if (last === undefined || record.epoch > last.epoch) {
      const sighting = { epoch: record.epoch, seenAt: this.#now() };
      this.#sightings.push(sighting);
      // Dropping the earliest sighting can only delay finality, never hasten it.
      if (this.#sightings.length > this.#maxEpochsKept) this.#sightings.shift();
      this.#stepTimes.push(sighting);
      if (this.#stepTimes.length > STEP_TIMES_KEPT) this.#stepTimes.shift();
    }
    // The record's own computeSeconds is the cumulative total, not the epoch's.
    this.#keepTotals(peerId, record.epoch, { lossSum: record.lossSum, minibatches: record.minibatches });
    if (record.previous !== undefined) this.#keepTotals(peerId, record.previous.epoch, record.previous);
    if (record.round !== undefined) this.#keepBytes(peerId, record.round.epoch, record.round.bytesSent);
  }

  /**
   * Starts over from the records that arrive from now on: after the swarm resumed from an older
   * state or was rolled back (then only records of `generation` count). Contributions are kept.
   */
  reset(generation: number = this.#generation): void {
    this.#generation = generation;
    this.#nextEpoch = undefined;
    this.#loss.clear();
    this.#sightings.length = 0;
    this.#stepTimes.length = 0;
  }

  get generation(): number {
    return this.#generation;
  }

  /** Fresh trainers of the current generation (less those not averaging) and their summed throughput, now. */
  liveness(): { alivePeers: number; samplesPerSecond: number } {
    const now = this.#now();
    // A paused trainer (its volunteer's rules hold it) is in the swarm but trains nothing now.
    const training = this.#freshTrainers(now).filter((peer) => peer.record.paused === undefined);
    return {
      alivePeers: this.#alive(training, now),
      samplesPerSecond: training.reduce((sum, peer) => sum + peer.record.samplesPerSecond, 0),
    };
  }

  /**
   * The trainers the swarm accepts now, as far as this aux sees: fresh trainer records of the
   * current generation, each with its averaging verdict (absent: too new to tell) and, while its
   * volunteer's rules hold it, why.
   */
  trainers(): Array<{ peerId: string; averaging?: boolean; paused?: PauseReason[] }> {
    const now = this.#now();
    const fresh = new Set(this.#freshTrainers(now));
    return [...this.#peers]
      .filter(([, peer]) => fresh.has(peer))
      .map(([peerId, peer]) => {
        const averaging = this.#averaging(peer, now);
        const { paused } = peer.record;
        return {
          peerId,
          ...(averaging === undefined ? {} : { averaging }),
          ...(paused === undefined ? {} : { paused: [...paused] }),
        };
      });
  }

  /** This node's own cumulative contribution (the aux: bytes it aggregated), added to `peers`. */
  setOwnContribution(contribution: PeerContribution | null): void {
    this.#own = contribution === null ? null : { ...contribution };
  }

  /** The steps that became final since the last call, in ascending order, each exactly once. */
  collect(): AggregatedStep[] {
    const now = this.#now();
    this.#forgetGonePeers();
    const next = this.#nextEpoch;
    if (next === undefined) return [];
    const bound = Math.min(this.#finalBound(now), this.currentStep());
    if (bound <= next) return [];

    const { samplesPerSecond, alivePeers } = this.liveness();
    const finalEpochs = [...this.#loss.keys()].filter((epoch) => epoch < bound).sort((a, b) => a - b);
    const steps: AggregatedStep[] = [];
    for (const epoch of finalEpochs) {
      const totals = this.#loss.get(epoch);
      this.#loss.delete(epoch);
      let lossSum = 0;
      let minibatches = 0;
      for (const peer of totals?.values() ?? []) {
        lossSum += peer.lossSum;
        minibatches += peer.minibatches;
      }
      if (minibatches === 0) continue;
      const loss = lossSum / minibatches;
      const samples = this.#witness?.samples(epoch);
      steps.push({
        step: epoch + 1,
        loss,
        samplesPerSecond,
        alivePeers,
        time: now,
        ...stepTraffic([...(totals?.values() ?? [])]),
        ...(samples === undefined ? {} : { samples }),
        peers: this.#contributions(now),
      });
      this.#latestLoss = loss;
    }
    this.#nextEpoch = bound;
    return steps;
  }

  /** The swarm's step as seen now: the highest epoch over fresh trainer records; 0 if none. */
  currentStep(): number {
    let step = 0;
    for (const peer of this.#freshTrainers(this.#now())) step = Math.max(step, peer.record.epoch);
    return step;
  }

  /** Every peer with a fresh record (and this node), with its contribution and verdict as of now. */
  contributions(): PeerContribution[] {
    return this.#contributions(this.#now());
  }

  /**
   * The trainers whose totals grew by more than the witness accepted of their samples, since the
   * last call (each growth once).
   */
  takeShortfalls(): PeerShortfall[] {
    const taken = this.#shortfalls;
    this.#shortfalls = [];
    return taken;
  }

  /** The samples credited so far by how they were checked (see `SessionCredit`); zeros without a witness. */
  creditTally(): Readonly<CreditTally> {
    return { ...this.#tally };
  }

  /** The loss of the latest collected step, or undefined before the first. */
  latestLoss(): number | undefined {
    return this.#latestLoss;
  }

  #keepTotals(peerId: string, epoch: number, totals: LossTotals): void {
    if (this.#nextEpoch === undefined || epoch < this.#nextEpoch || totals.minibatches === 0) return;
    let byPeer = this.#loss.get(epoch);
    if (byPeer === undefined) {
      byPeer = new Map();
      this.#loss.set(epoch, byPeer);
      this.#dropOldEpochs();
    }
    const kept = byPeer.get(peerId);
    if (kept === undefined || totals.minibatches >= kept.minibatches) {
      byPeer.set(peerId, {
        lossSum: totals.lossSum,
        minibatches: totals.minibatches,
        // A record of the epoch itself has no final totals yet: keep those a `previous` gave.
        computeSeconds: totals.computeSeconds ?? kept?.computeSeconds,
        wallSeconds: totals.wallSeconds ?? kept?.wallSeconds,
        bytesSent: kept?.bytesSent,
      });
    }
  }

  #keepBytes(peerId: string, epoch: number, bytesSent: number): void {
    if (this.#nextEpoch === undefined || epoch < this.#nextEpoch) return;
    const kept = this.#loss.get(epoch)?.get(peerId);
    // Only for an epoch the peer trained in (it has totals): its bytes then count for that step.
    if (kept !== undefined) kept.bytesSent = bytesSent;
  }

  /** Over the limit, the oldest epoch is marked done, so partial totals for it are never emitted. */
  #dropOldEpochs(): void {
    while (this.#loss.size > this.#maxEpochsKept) {
      const oldest = Math.min(...this.#loss.keys());
      this.#loss.delete(oldest);
      this.#nextEpoch = Math.max(this.#nextEpoch ?? 0, oldest + 1);
    }
  }

  /** Epochs below the returned one have seen a later epoch for at least `graceMs`. */
  #finalBound(now: number): number {
    // Sightings are in time order, so the due ones are a prefix; only its last one matters from now on.
    let due = 0;
    for (const sighting of this.#sightings) {
      if (now - sighting.seenAt < this.#graceMs) break;
      due++;
    }
    if (due > 1) this.#sightings.splice(0, due - 1);
    return due === 0 ? 0 : (this.#sightings[0]?.epoch ?? 0);
  }

  #freshTrainers(now: number): PeerState[] {
    return [...this.#peers.values()].filter(
      (peer) =>
        peer.record.mode !== "aux" &&
        (peer.record.generation ?? 0) === this.#generation &&
        now - peer.receivedAt <= this.#ttlMs,
    );
  }

  #alive(fresh: readonly PeerState[], now: number): number {
    return fresh.filter((peer) => this.#averaging(peer, now) !== false).length;
  }

  /** Whether a trainer put samples into a collaborative step within the window; undefined if too new to tell. */
  #averaging(peer: PeerState, now: number): boolean | undefined {
    if (peer.record.mode === "aux") return undefined;
    const window = Math.max(this.#averagingWindowMs, 3 * this.#stepIntervalMs());
    if (peer.contributedAt !== undefined && now - peer.contributedAt <= window) return true;
    return now - peer.sessionStart <= window ? undefined : false;
  }

  /** The swarm's recent time per step, from the latest epochs' first sightings; 0 before two. */
  #stepIntervalMs(): number {
    const first = this.#stepTimes[0];
    const last = this.#stepTimes.at(-1);
    if (first === undefined || last === undefined || last.epoch <= first.epoch) return 0;
    return (last.seenAt - first.seenAt) / (last.epoch - first.epoch);
  }

  #contributions(now: number): PeerContribution[] {
    this.#settleCredit();
    const peers: PeerContribution[] = [];
    for (const [peerId, peer] of this.#peers) {
      const { record, receivedAt, sessionStart } = peer;
      const credit = this.#credits.get(creditKey(peerId, record))?.credit;
      if (now - receivedAt > this.#ttlMs) continue;
      const averaging = this.#averaging(peer, now);
      peers.push({
        peerId,
        ...(record.session === undefined ? {} : { session: record.session }),
        samples: credit?.samples ?? record.samplesTotal ?? 0,
        computeSeconds: record.computeSeconds ?? 0,
        bytesAggregated: record.bytesAggregated,
        sessionSeconds: Math.max(0, now - sessionStart) / 1000,
        ...(averaging === undefined ? {} : { averaging }),
      });
    }
    if (this.#own !== null) peers.push({ ...this.#own });
    return peers.sort((a, b) => (a.peerId < b.peerId ? -1 : a.peerId > b.peerId ? 1 : 0));
  }

  /** Takes `record` into its trainer session's credit (kept only with a witness). */
  #observeCredit(peerId: string, record: ProgressRecord, receivedAt: number): void {
    if (this.#witness === undefined || record.mode === "aux") return;
    const key = creditKey(peerId, record);
    const kept = this.#credits.get(key);
    // Kept in order of the latest record, the oldest first.
    this.#credits.delete(key);
    if (kept !== undefined) kept.credit.observe(record);
    const credit = kept?.credit ?? new SessionCredit(peerId, record, receivedAt);
    this.#credits.set(key, { peerId, credit, seenAt: receivedAt });
    for (const [oldKey, old] of this.#credits) {
      if (this.#credits.size <= MAX_CREDITS_KEPT && receivedAt - old.seenAt <= CREDIT_MEMORY_MS) break;
      this.#credits.delete(oldKey);
    }
  }

  /** Accounts what the witness can decide now of every kept session's rounds. */
  #settleCredit(): void {
    const witness = this.#witness;
    if (witness === undefined) return;
    for (const { peerId, credit } of this.#credits.values()) {
      for (const shortfall of credit.settle(witness, this.#tally))
        this.#shortfalls.push({ peerId, ...shortfall });
    }
    if (this.#shortfalls.length > MAX_SHORTFALLS) {
      this.#shortfalls.splice(0, this.#shortfalls.length - MAX_SHORTFALLS);
    }
  }

  #forgetGonePeers(): void {
    const now = this.#now();
    for (const [peerId, peer] of this.#peers) {
      if (now - peer.receivedAt > 10 * this.#ttlMs) this.#peers.delete(peerId);
    }
  }
}

/** A step's traffic and utilization from its trainers' final totals; fields absent when nobody said. */
function stepTraffic(totals: readonly LossTotals[]): Pick<AggregatedStep, "bytesPerPeer" | "utilization"> {
  const sent = totals.flatMap((peer) => (peer.bytesSent === undefined ? [] : [peer.bytesSent]));
  let compute = 0;
  let wall = 0;
  for (const peer of totals) {
    if (peer.computeSeconds === undefined || peer.wallSeconds === undefined || !(peer.wallSeconds > 0)) {
      continue;
    }
    compute += peer.computeSeconds;
    wall += peer.wallSeconds;
  }
  return {
    ...(sent.length === 0 ? {} : { bytesPerPeer: sent.reduce((sum, bytes) => sum + bytes, 0) / sent.length }),
    ...(wall > 0 ? { utilization: Math.min(1, compute / wall) } : {}),
  };
}

/** A trainer session's key in the kept credits. */
function creditKey(peerId: string, record: ProgressRecord): string {
  return `${peerId}\0${record.session ?? ""}`;
}

/** Trainer sessions whose credit is kept, and for how long after their latest record. */
const MAX_CREDITS_KEPT = 4096;
const CREDIT_MEMORY_MS = 30 * 60_000;

/** Shortfalls kept between two calls of `takeShortfalls`. */
const MAX_SHORTFALLS = 256;

/** First sightings kept for the step interval. */
const STEP_TIMES_KEPT = 8;

function checked(value: number, name: string, valid: (value: number) => boolean): number {
  if (!Number.isFinite(value) || !valid(value)) throw new RangeError(`${name} is invalid: ${value}`);
  return value;
}
