import { type PauseReason, type PeerRole, pauseReasonsSchema } from "@barnraise/protocol";
import { SwarmError, SwarmErrorCode } from "../errors.ts";
import type { PeerIdString, Rpc, RpcPeer } from "../rpc/rpc.ts";
import {
  MAX_PERIOD_MS,
  progressRecordSchema,
  sessionSchema,
  type ProgressMode,
  type ProgressRecord,
} from "./progress-messages.ts";
import {
  RpcProgressTransport,
  type OfferOutcome,
  type ProgressLogger,
  type ProgressTransport,
} from "./progress-transport.ts";
import { implausibility } from "./record-plausibility.ts";
import {
  estimateSwarm,
  generationOf,
  isFresh,
  type ReceivedProgress,
  type SwarmEstimate,
} from "./swarm-estimate.ts";
import { unrefTimer } from "../time/unref-timer.ts";

export type { ProgressLogger } from "./progress-transport.ts";

/** How records travel: a transport (the engine's gossip), or direct pushes over the rpc layer. */
export type ProgressDelivery =
  | { readonly transport: ProgressTransport }
  | {
      readonly rpc: Rpc;
      /** The peers currently connected and authorized; each push goes to all of them. */
      readonly peers: () => readonly PeerIdString[];
      /** Time limit of one push; default max(intervalMs, 2 s). */
      readonly callTimeoutMs?: number;
    };

export type ProgressTrackerOptions = ProgressDelivery & ProgressTrackerSettings;

export interface ProgressTrackerSettings {
  /** Samples the swarm accumulates per optimizer step. */
  readonly targetBatchSize: number;
  /** Shortest publish period, the period of a small swarm; default 1000 ms. */
  readonly intervalMs?: number;
  /**
   * Records the whole swarm publishes per second at most on the periodic schedule: each peer
   * publishes every max(intervalMs, n / recordsPerSecond s) for a swarm of n it knows of; default 16.
   */
  readonly recordsPerSecond?: number;
  /**
   * A record received longer ago than this is dead; default 3 × intervalMs + 2 s. A record whose
   * sender publishes less often (a large swarm) lives 3 × its period + 2 s.
   */
  readonly ttlMs?: number;
  /** Most records kept from other peers; a new peer's record is dropped when the table is full. */
  readonly maxPeers?: number;
  /** Records accepted per second from one peer, with bursts of as many; the rest are dropped. */
  readonly maxRecordsPerSecond?: number;
  /** This node's mode, asked at each report unless the report names one; default "node". */
  readonly mode?: () => ProgressMode;
  /** This process's session id (≤ 32 of [A-Za-z0-9_-]), put into every local record. */
  readonly session?: string;
  /** This peer's link capacity, put into every local record. */
  readonly link?: () => NonNullable<ProgressRecord["link"]>;
  readonly now?: () => number;
  readonly logger?: ProgressLogger;
}

/** What a local trainer reports; fields left out keep their previous values (see `report`). */
export type LocalProgress = Pick<ProgressRecord, "epoch" | "samplesAccumulated" | "samplesPerSecond"> &
  Partial<ProgressRecord>;

/** A fresh record received from another peer, with who sent it (from its verified pass). */
export interface PeerProgressRecord {
  readonly peerId: PeerIdString;
  readonly username: string;
  readonly role: PeerRole;
  readonly record: ProgressRecord;
  /** Unix ms on the local clock. */
  readonly receivedAt: number;
}

/** The publish period a swarm of `swarmSize` gives (see ProgressTrackerSettings.recordsPerSecond). */
export function publishPeriodMs(swarmSize: number, intervalMs: number, recordsPerSecond: number): number {
  return Math.min(MAX_PERIOD_MS, Math.max(intervalMs, Math.ceil((1000 * swarmSize) / recordsPerSecond)));
}

/** How long a record published every `periodMs` stays alive: three periods and 2 s of slack. */
export function ttlForPeriod(periodMs: number): number {
  return 3 * periodMs + 2000;
}

export type ProgressListener = (update: PeerProgressRecord) => void;

/** What the collaborative optimizer reads (its `ProgressPort.global`). */
export interface GlobalProgress {
  readonly epoch: number;
  readonly samplesAccumulated: number;
  readonly targetBatchSize: number;
  readonly etaSeconds: number;
}

/** The progress of one epoch as if it were the swarm's (its `ProgressPort.at`). */
export interface EpochProgress extends GlobalProgress {
  /** Trainers at the epoch, this node included when it is one of them. */
  readonly peersAtEpoch: number;
}

/** What a trainer announced for one epoch: its latest accepted samples toward it and throughput. */
interface Announced {
  readonly samples: number;
  readonly samplesPerSecond: number;
  /** When the record that said so arrived (local clock). */
  readonly at: number;
  /** How long that record lived: the extrapolation's limit. */
  readonly ttlMs: number;
}

/**
 * The least extrapolation a round's weight is allowed beyond the announced samples: a record is up
 * to a period old when the round starts, and gossip may bring the last one after the round's head.
 */
const MIN_EARNED_EXTRAPOLATION_MS = 5_000;

/**
 * How long a reducer waits for the record that announces a member's weight when the records it
 * holds do not earn it yet: a member publishes the samples of a round as the round starts, and
 * gossip may bring that record after the member's stream (seen under load).
 */
export const EARNED_RECORD_WAIT_MS = 3_000;

/** How long a sender whose records are refused is remembered, so that its next ones are judged against its last accepted one. */
const REFUSED_MEMORY_MS = 10 * 60_000;
/** Epochs of announced samples kept per peer (the latest announced): the current, the one averaging, one more. */
const ANNOUNCED_EPOCHS = 3;
/**
 * A member's weight in a round may exceed what its records announced, extrapolated at its
 * throughput to the round, by this factor (records are up to a period old, minibatches land whole).
 */
const EARNED_WEIGHT_SLACK = 1.25;

/** A trainer record refused as implausible (see `implausibility`), and its sender. */
export interface ImplausibleRecord {
  readonly peerId: PeerIdString;
  readonly username: string;
  readonly reason: string;
  /** Records of this sender refused so far. */
  readonly count: number;
}

interface TableEntry {
  readonly peerId: PeerIdString;
  username: string;
  role: PeerRole;
  record: ProgressRecord;
  receivedAt: number;
  /** How long this record stays alive: from the period its sender publishes at. */
  ttlMs: number;
  /** Token bucket of the per-peer rate cap: records it may still send now, and when that was computed. */
  tokens: number;
  tokensAt: number;
  /** Samples it announced per epoch (its latest ANNOUNCED_EPOCHS epochs), for `earnedWeight`. */
  readonly announced: Map<number, Announced>;
  /**
   * The largest growth of its samples between two of its records (this session): the size of its
   * minibatches or of what it adds between publishes, which a round may bring beyond the last record.
   */
  largestGain: number;
  /**
   * When its first record arrived (for NEWCOMER_GRACE_MS); not reset by a new session, so a key
   * cannot renew its grace by naming a new session in every record.
   */
  firstSeenAt: number;
  /** Its latest record was refused as implausible: hidden from every view until one is accepted. */
  refused: boolean;
}

/**
 * How long after its first record a trainer that has announced no samples yet still counts as one
 * that will (`hasContributed`): honest peers that start together publish their first records with nothing
 * accumulated, and each saw the others' first samples at a different moment; treated as phantoms
 * meanwhile, they picked different leaders and waited for different members, and four in-process
 * peers split into two pairs for the whole run in about half the runs (235 to 284 failed rounds of
 * ~400, "no group formed"), against none of 6 before the check. A key that never contributes costs
 * the swarm this long each time its records start anew (after they expired).
 */
export const NEWCOMER_GRACE_MS = 10_000;

/**
 * Progress tracking (DeDLOC §3.1): spreads this node's progress record to the swarm, keeps the
 * latest record of each peer (keyed by the authenticated origin, never by the body), and estimates
 * the swarm's total toward the target batch size. Also serves as the optimizer's progress port
 * (`report`, `global`) and as the aux monitor's source of per-peer metrics.
 *
 * Scale. Pushing every record to every member costs n² messages per period in a swarm of n. The
 * engine gossips instead (GossipProgressTransport): each record is signed by its origin and
 * relayed along gossipsub's mesh, so a peer sends and receives a bounded number of copies of each
 * record whatever n is. Gossip still brings every peer's record to every peer, so the periodic
 * publish slows down as the swarm grows: each peer publishes every
 * max(intervalMs, n / recordsPerSecond s), which keeps the swarm-wide rate at recordsPerSecond at
 * most, and so the records a peer handles per second flat in n. Each record names the period its
 * sender publishes at, and a receiver keeps it alive for three periods (plus 2 s), so peers that
 * count the swarm a little differently still agree on who is alive. The estimate extrapolates each
 * record by its sender's throughput up to that lifetime, so longer periods cost no accuracy while
 * throughputs hold.
 *
 * What matchmaking waits for goes out promptly: a new epoch or a change of the round in flight
 * (averagingEpoch) publishes at once. Once the swarm is large enough for the period to grow, at
 * most one such publish goes out per quarter period (at least 250 ms), so a peer never sends more
 * than a few records per period; a small swarm publishes each change at once, since its peers
 * wait on each other's next record. Direct delivery (pushes over the rpc
 * layer) remains for small swarms and tests; it needs no relaying.
 */
export class ProgressTracker {
  readonly #transport: ProgressTransport;
  readonly #target: number;
  readonly #intervalMs: number;
  readonly #recordsPerSecond: number;
  readonly #ttlMs: number;
  readonly #maxPeers: number;
  readonly #ratePerSecond: number;
  readonly #burst: number;
  readonly #mode: () => ProgressMode;
  readonly #session: string | undefined;
  readonly #link: ProgressTrackerSettings["link"];
  readonly #now: () => number;
  readonly #logger: ProgressLogger | undefined;
  readonly #table = new Map<PeerIdString, TableEntry>();
  readonly #listeners = new Set<ProgressListener>();
  readonly #implausibleListeners = new Set<(refused: ImplausibleRecord) => void>();
  /** Implausible records per sender (kept for the peers seen most recently). */
  readonly #strikes = new Map<PeerIdString, number>();
  #local: ReceivedProgress | null = null;
  #timer: ReturnType<typeof setInterval> | undefined;
  /** A prompt publish held back by the minimum gap. */
  #deferred: ReturnType<typeof setTimeout> | undefined;
  #running = false;
  #lastPublishAt = -Infinity;
  /** The volunteer's reasons for holding this trainer (see `setPaused`); empty while it trains. */
  #paused: readonly PauseReason[] = [];

  constructor(options: ProgressTrackerOptions) {
    this.#target = positive(options.targetBatchSize, "targetBatchSize");
    this.#intervalMs = positive(options.intervalMs ?? 1000, "intervalMs");
    this.#recordsPerSecond = positive(options.recordsPerSecond ?? 16, "recordsPerSecond");
    this.#ttlMs = positive(options.ttlMs ?? ttlForPeriod(this.#intervalMs), "ttlMs");
    this.#maxPeers = positive(options.maxPeers ?? 1024, "maxPeers");
    this.#ratePerSecond = positive(options.maxRecordsPerSecond ?? 10, "maxRecordsPerSecond");
    this.#burst = Math.max(1, this.#ratePerSecond);
    this.#mode = options.mode ?? (() => "node");
    if (options.session !== undefined && !sessionSchema.safeParse(options.session).success) {
      throw new SwarmError(
        SwarmErrorCode.MALFORMED_MESSAGE,
        `session must be 1 to 32 of [A-Za-z0-9_-], got ${JSON.stringify(options.session.slice(0, 40))}`,
      );
    }
    this.#session = options.session;
    this.#link = options.link;
    this.#now = options.now ?? Date.now;
    this.#logger = options.logger;
    this.#transport =
      "transport" in options
        ? options.transport
        : new RpcProgressTransport({
            rpc: options.rpc,
            peers: options.peers,
            callTimeoutMs: positive(
              options.callTimeoutMs ?? Math.max(this.#intervalMs, 2000),
              "callTimeoutMs",
            ),
            ...(options.logger === undefined ? {} : { logger: options.logger }),
          });
  }

  /** Starts receiving records and publishing this node's on its period. */
  start(): void {
    if (this.#running) return;
    this.#running = true;
    this.#transport.start((from, record) => this.#accept(from, record));
    this.#timer = setInterval(() => {
      if (this.#now() - this.#lastPublishAt >= this.periodMs() - this.#intervalMs / 2) void this.pushNow();
    }, this.#intervalMs);
    unrefTimer(this.#timer);
  }

  /** Stops receiving and publishing; in-flight sends are aborted. Records stay readable. */
  stop(): void {
    if (!this.#running) return;
    this.#running = false;
    clearInterval(this.#timer);
    clearTimeout(this.#deferred);
    this.#timer = undefined;
    this.#deferred = undefined;
    this.#transport.stop();
  }

  /** The swarm size this node knows of: itself and every peer with a live record. */
  swarmSize(): number {
    const now = this.#now();
    let alive = 1;
    for (const entry of this.#table.values()) if (live(entry, now)) alive += 1;
    return alive;
  }

  /** This node's publish period now (see the class comment). */
  periodMs(): number {
    return publishPeriodMs(this.swarmSize(), this.#intervalMs, this.#recordsPerSecond);
  }

  /**
   * Updates this node's record. Left-out fields keep their previous values, except that `lossSum`
   * and `minibatches` restart at 0 and `previous` is dropped with a new epoch, `averagingEpoch` is
   * dropped unless given, `step` defaults to `epoch` and `time` to now. The session given at
   * construction is put into every record.
   * Publishes promptly (see the class comment) when the epoch or the averaging epoch changes.
   * Throws MALFORMED_MESSAGE for an invalid record.
   */
  report(local: LocalProgress): void {
    const now = this.#now();
    const previous = this.#local?.record;
    const sameEpoch = previous !== undefined && previous.epoch === local.epoch;
    // Another epoch's record says nothing about the epoch before it unless the caller does, and a
    // background round is only under way while the caller says so.
    const kept = previous === undefined ? previous : carriedOver(previous, sameEpoch);
    const candidate = {
      bytesAggregated: 0,
      ...kept,
      mode: this.#mode(),
      lossSum: sameEpoch ? previous.lossSum : 0,
      minibatches: sameEpoch ? previous.minibatches : 0,
      ...local,
      step: local.step ?? local.epoch,
      time: local.time ?? Math.round(now),
      ...(this.#session === undefined ? {} : { session: this.#session }),
      ...(this.#link === undefined ? {} : { link: this.#link() }),
      ...(this.#paused.length === 0 ? {} : { paused: [...this.#paused] }),
    };
    const parsed = progressRecordSchema.safeParse(candidate);
    if (!parsed.success) {
      const issues = parsed.error.issues.map((issue) => `${issue.path.join(".")}: ${issue.message}`);
      throw new SwarmError(SwarmErrorCode.MALFORMED_MESSAGE, `invalid local progress: ${issues.join("; ")}`);
    }
    this.#local = { peerId: this.#transport.self, record: parsed.data, receivedAt: now };
    const roundChanged = previous?.averagingEpoch !== parsed.data.averagingEpoch;
    if ((!sameEpoch || roundChanged) && this.#running) this.#publishSoon();
  }

  /**
   * Says in this node's record that the volunteer's rules hold its training now (`reasons`), or,
   * with none, that it trains again. A change goes out at once, so that the others stop counting
   * this trainer and waiting for it (or count it again) without waiting for its next report; later
   * reports keep it. Throws MALFORMED_MESSAGE for a repeated reason.
   */
  setPaused(reasons: readonly PauseReason[]): void {
    if (reasons.length > 0 && !pauseReasonsSchema.safeParse(reasons).success) {
      throw new SwarmError(SwarmErrorCode.MALFORMED_MESSAGE, `invalid pause reasons: ${reasons.join(", ")}`);
    }
    const same =
      reasons.length === this.#paused.length && reasons.every((reason, i) => reason === this.#paused[i]);
    if (same) return;
    this.#paused = [...reasons];
    const local = this.#local;
    if (local === null) return;
    const { paused: _was, ...record } = local.record;
    this.#local = { ...local, record: reasons.length === 0 ? record : { ...record, paused: [...reasons] } };
    if (this.#running) this.#publishSoon();
  }

  /**
   * Publishes the latest local record now, whatever the period, and resolves when the transport is
   * done with it. Never rejects: failures are logged at debug.
   */
  async pushNow(): Promise<void> {
    this.#expire();
    const local = this.#local;
    if (local === null || !this.#running) return;
    clearTimeout(this.#deferred);
    this.#deferred = undefined;
    this.#lastPublishAt = this.#now();
    await this.#transport.publish({ ...local.record, periodMs: this.periodMs() });
  }

  /** This node's latest record, or null before its first `report`. */
  localRecord(): ProgressRecord | null {
    return this.#local?.record ?? null;
  }

  /** This node's run generation: its record's (0 before its first report or when it names none). */
  generation(): number {
    return generationOf(this.#local?.record);
  }

  /**
   * The digests other trainers of this node's generation publish for their state at `epoch`, each
   * with the peers holding it (fresh records; Moshpit grid steps, whose digests are their groups',
   * left out): the optimizer's `ProgressPort.sharedStates`.
   */
  sharedStates(epoch: number): Map<string, PeerIdString[]> {
    const generation = this.generation();
    const holders = new Map<string, PeerIdString[]>();
    for (const { peerId, record } of this.records()) {
      const hash = record.stateHash;
      if (record.mode === "aux" || generationOf(record) !== generation || hash === undefined) continue;
      if (hash.epoch !== epoch || hash.grid === true) continue;
      holders.set(hash.digest, [...(holders.get(hash.digest) ?? []), peerId]);
    }
    return holders;
  }

  /**
   * The swarm estimate at this moment (DeDLOC §3.1): trainers of this node's generation only.
   * With `epoch`, the estimate for that epoch as if it were the swarm's; with `offsetMs`, the records
   * held now extrapolated to that many milliseconds from now (negative: a moment ago).
   */
  snapshot(epoch?: number, offsetMs = 0): SwarmEstimate {
    // Others extrapolate this node's record up to the lifetime its period gives; so does it.
    const local =
      this.#local === null
        ? null
        : { ...this.#local, ttlMs: Math.max(this.#ttlMs, ttlForPeriod(this.periodMs())) };
    return estimateSwarm({
      peers: [...this.#table.values()].filter((entry) => !entry.refused),
      local,
      now: this.#now() + offsetMs,
      ttlMs: this.#ttlMs,
      targetBatchSize: this.#target,
      ...(epoch === undefined ? {} : { epoch }),
    });
  }

  /** The optimizer's view: the swarm's epoch, its samples toward the target, and the ETA. */
  global(): GlobalProgress {
    const { epoch, samplesAccumulated, targetBatchSize, etaSeconds } = this.snapshot();
    return { epoch, samplesAccumulated, targetBatchSize, etaSeconds };
  }

  /**
   * The optimizer's view as it was `agoMs` milliseconds ago, by the records held now: whether a
   * minibatch that just ended was mostly computed before the swarm reached its target.
   */
  globalBefore(agoMs: number): GlobalProgress {
    const { epoch, samplesAccumulated, targetBatchSize, etaSeconds } = this.snapshot(undefined, -agoMs);
    return { epoch, samplesAccumulated, targetBatchSize, etaSeconds };
  }

  /**
   * The view of `epoch` as if it were the swarm's epoch: only the trainers at it count. A peer that
   * cannot catch up with a swarm ahead of it trains on with whoever is at its own epoch.
   */
  at(epoch: number): EpochProgress {
    const { samplesAccumulated, targetBatchSize, etaSeconds, peersAtEpoch } = this.snapshot(epoch);
    return { epoch, samplesAccumulated, targetBatchSize, etaSeconds, peersAtEpoch };
  }

  /**
   * Fresh records from other peers (this node's own is not included), for the aux monitor. With
   * `sameGeneration`, only those of this node's run generation.
   */
  records(options: { sameGeneration?: boolean } = {}): PeerProgressRecord[] {
    const generation = options.sameGeneration === true ? this.generation() : undefined;
    const now = this.#now();
    const fresh: PeerProgressRecord[] = [];
    for (const entry of this.#table.values()) {
      const { peerId, username, role, record, receivedAt } = entry;
      if (!live(entry, now)) continue;
      if (generation !== undefined && generationOf(record) !== generation) continue;
      fresh.push({ peerId, username, role, record, receivedAt });
    }
    return fresh;
  }

  /** Calls `listener` for every record accepted from a peer; returns the unsubscribe function. */
  on(_event: "update", listener: ProgressListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Calls `listener` for every trainer record refused as implausible; returns the unsubscribe function. */
  onImplausible(listener: (refused: ImplausibleRecord) => void): () => void {
    this.#implausibleListeners.add(listener);
    return () => this.#implausibleListeners.delete(listener);
  }

  /**
   * The most weight `peer` can have earned for `epoch`: the samples its accepted records announced
   * for that epoch, plus what it may have added since at its announced throughput (over the time
   * since that record, at least 5 s, at most the record's lifetime) or, when larger, the largest
   * growth seen between two of its records, all with 25 % of slack; 0 when it announced nothing
   * for that epoch. A member of a round declaring more did not earn it (the reducer's weight check).
   */
  earnedWeight(peer: PeerIdString, epoch: number): number {
    const entry = this.#table.get(peer);
    const announced = entry?.announced.get(epoch);
    if (entry === undefined || announced === undefined || entry.refused) return 0;
    const elapsedMs = Math.min(
      announced.ttlMs,
      Math.max(MIN_EARNED_EXTRAPOLATION_MS, this.#now() - announced.at),
    );
    const since = Math.max((announced.samplesPerSecond * elapsedMs) / 1000, entry.largestGain);
    return (announced.samples + since) * EARNED_WEIGHT_SLACK;
  }

  /**
   * `earnedWeight`, once it reaches `declared` or, when it does not, after waiting `waitMs` for
   * records of `peer` (the one announcing the round may still be on its way) or until `signal`
   * aborts. Never rejects.
   */
  awaitEarnedWeight(
    peer: PeerIdString,
    epoch: number,
    declared: number,
    signal?: AbortSignal,
    waitMs = EARNED_RECORD_WAIT_MS,
  ): Promise<number> {
    const earned = this.earnedWeight(peer, epoch);
    if (earned >= declared || signal?.aborted === true) return Promise.resolve(earned);
    return new Promise((resolve) => {
      const finish = () => {
        clearTimeout(timer);
        unsubscribe();
        signal?.removeEventListener("abort", finish);
        resolve(this.earnedWeight(peer, epoch));
      };
      const timer = setTimeout(finish, waitMs);
      const unsubscribe = this.on("update", (update) => {
        if (update.peerId === peer && this.earnedWeight(peer, epoch) >= declared) finish();
      });
      signal?.addEventListener("abort", finish, { once: true });
    });
  }

  /**
   * Whether `peer` has announced samples in its current session, or its first record came less
   * than NEWCOMER_GRACE_MS ago: a member that has contributed nothing since is not planned into rounds,
   * led by, nor waited for (phantom keys stall nobody for long).
   */
  hasContributed(peer: PeerIdString): boolean {
    const entry = this.#table.get(peer);
    if (entry === undefined || entry.refused) return false;
    return entry.largestGain > 0 || this.#now() - entry.firstSeenAt < NEWCOMER_GRACE_MS;
  }

  /** Publishes now, or, in a swarm large enough to publish less often, once the minimum gap since the last publish has passed. */
  #publishSoon(): void {
    const periodMs = this.periodMs();
    const gapMs = periodMs > this.#intervalMs ? Math.max(250, periodMs / 4) : 0;
    const waitMs = this.#lastPublishAt + gapMs - this.#now();
    if (waitMs <= 0) {
      void this.pushNow();
      return;
    }
    if (this.#deferred !== undefined) return;
    this.#deferred = setTimeout(() => {
      this.#deferred = undefined;
      void this.pushNow();
    }, waitMs);
    unrefTimer(this.#deferred);
  }

  /**
   * Takes a record from an authenticated peer: "ignored" when it is dropped for the receiver's own
   * limits (rate cap, full table), "implausible" when a trainer's record claims what cannot be
   * true (see `implausibility`): then the sender's standing record is dropped too, and it counts.
   */
  #accept(from: RpcPeer, received: ProgressRecord): OfferOutcome {
    if (from.peerId === this.#transport.self) return "ignored";
    const now = this.#now();
    const { periodMs, ...record } = received;
    const ttlMs = Math.max(this.#ttlMs, periodMs === undefined ? 0 : ttlForPeriod(periodMs));
    let entry = this.#table.get(from.peerId);
    if (entry !== undefined) {
      const refill = (Math.max(0, now - entry.tokensAt) / 1000) * this.#ratePerSecond;
      entry.tokens = Math.min(this.#burst, entry.tokens + refill);
      entry.tokensAt = now;
      if (entry.tokens < 1) {
        this.#logger?.debug({ peer: from.peerId }, "progress records arrive too fast, record dropped");
        return "ignored";
      }
      entry.tokens -= 1;
    }
    if (from.pass.role !== "aux" && record.mode !== "aux") {
      const reason = this.#implausibility(from, record, entry, now);
      if (reason !== undefined) {
        this.#refuseImplausible(from, reason);
        return "implausible";
      }
    }
    if (entry === undefined) {
      if (this.#table.size >= this.#maxPeers) this.#expire();
      if (this.#table.size >= this.#maxPeers) {
        this.#logger?.debug({ peer: from.peerId }, "progress table full, record dropped");
        return "ignored";
      }
      entry = {
        peerId: from.peerId,
        username: from.pass.username,
        role: from.pass.role,
        record,
        receivedAt: now,
        ttlMs,
        tokens: this.#burst - 1,
        tokensAt: now,
        announced: new Map(),
        largestGain: 0,
        firstSeenAt: now,
        refused: false,
      };
      this.#table.set(from.peerId, entry);
    }
    // Another session announces anew; so does a rollback (another generation, whose epochs start
    // over), though the peer has contributed all the same.
    if (record.session !== entry.record.session) {
      entry.announced.clear();
      entry.largestGain = 0;
    } else if (generationOf(record) !== generationOf(entry.record)) {
      entry.announced.clear();
    }
    if (record.mode !== "aux") {
      const before = entry.announced.get(record.epoch)?.samples ?? 0;
      entry.largestGain = Math.max(entry.largestGain, record.samplesAccumulated - before);
      // The epochs announced most recently are kept, whatever their numbers.
      entry.announced.delete(record.epoch);
      entry.announced.set(record.epoch, {
        samples: record.samplesAccumulated,
        samplesPerSecond: record.samplesPerSecond,
        at: now,
        ttlMs,
      });
      while (entry.announced.size > ANNOUNCED_EPOCHS) {
        const oldest = entry.announced.keys().next().value;
        if (oldest === undefined) break;
        entry.announced.delete(oldest);
      }
    }
    entry.refused = false;
    entry.username = from.pass.username;
    entry.role = from.pass.role;
    entry.record = record;
    entry.receivedAt = now;
    entry.ttlMs = ttlMs;
    const update: PeerProgressRecord = {
      peerId: entry.peerId,
      username: entry.username,
      role: entry.role,
      record,
      receivedAt: now,
    };
    for (const listener of this.#listeners) {
      try {
        listener(update);
      } catch (error) {
        this.#logger?.debug({ err: error }, "progress listener threw");
      }
    }
    return "accepted";
  }

  /** Why `record` from `from` cannot be true, judged against the other trainers' fresh records. */
  #implausibility(
    from: RpcPeer,
    record: ProgressRecord,
    entry: TableEntry | undefined,
    now: number,
  ): string | undefined {
    const generation = generationOf(record);
    const others: ProgressRecord[] = [];
    for (const other of this.#table.values()) {
      if (other.peerId === from.peerId || other.role === "aux" || other.record.mode === "aux") continue;
      if (generationOf(other.record) !== generation || !live(other, now)) continue;
      others.push(other.record);
    }
    // A trainer's own record is a reference it can trust once it holds the swarm's state: beside one
    // other trainer it checks a newcomer's claims as the aux does (with only one other reference, a
    // liar that reached it directly would otherwise set its swarm's step). A trainer that has not
    // loaded the state yet (just started, its state at epoch 0) knows nothing of where the swarm is:
    // its record would make an honest peer far ahead look like a liar (seen in the soak after a
    // re-token restarted every peer).
    const own = this.#local?.record;
    if (
      own !== undefined &&
      own.mode !== "aux" &&
      generationOf(own) === generation &&
      (own.stateHash?.epoch ?? 0) > 0
    ) {
      others.push(own);
    }
    // The state this node holds is where the swarm has been at least: an aux serves it (the
    // checkpoint every restarted trainer loads), a trainer loaded it.
    const knownEpoch =
      own === undefined || generationOf(own) !== generation
        ? undefined
        : own.mode === "aux"
          ? own.stateEpoch
          : own.stateHash?.epoch;
    const ofSession = entry !== undefined && entry.record.session === record.session ? entry : undefined;
    const sameSession = ofSession !== undefined && isFresh(ofSession, now, ofSession.ttlMs);
    let announcedSamples = record.samplesAccumulated;
    if (ofSession !== undefined) {
      for (const [epoch, announced] of ofSession.announced) {
        if (epoch !== record.epoch) announcedSamples += announced.samples;
      }
    }
    return implausibility(record, {
      previous: sameSession ? { record: ofSession.record, receivedAt: ofSession.receivedAt } : undefined,
      lastAccepted:
        ofSession === undefined ? undefined : { record: ofSession.record, receivedAt: ofSession.receivedAt },
      others,
      knownEpoch,
      now,
      announcedSamples,
    });
  }

  #refuseImplausible(from: RpcPeer, reason: string): void {
    // Its standing record may have been the first step of the same lie: it no longer counts. The
    // entry stays (hidden) so that its next records are judged against what it last got accepted.
    const entry = this.#table.get(from.peerId);
    if (entry !== undefined) entry.refused = true;
    const count = (this.#strikes.get(from.peerId) ?? 0) + 1;
    this.#strikes.delete(from.peerId);
    this.#strikes.set(from.peerId, count);
    if (this.#strikes.size > this.#maxPeers) {
      const oldest = this.#strikes.keys().next().value;
      if (oldest !== undefined) this.#strikes.delete(oldest);
    }
    // The first refusal of a sender and then every tenth, so a flood cannot flood the log.
    if (count % 10 === 1) {
      const fields = { peer: from.peerId, username: from.pass.username, count, reason };
      const message = `refused an implausible progress record from ${from.pass.username}: ${reason}`;
      if (this.#logger?.warn === undefined) this.#logger?.debug(fields, message);
      else this.#logger.warn(fields, message);
    }
    const refused: ImplausibleRecord = { peerId: from.peerId, username: from.pass.username, reason, count };
    for (const listener of this.#implausibleListeners) {
      try {
        listener(refused);
      } catch (error) {
        this.#logger?.debug({ err: error }, "implausible-record listener threw");
      }
    }
  }

  /** Forgets records that are no longer alive, so the table only holds live peers. */
  #expire(): void {
    const now = this.#now();
    for (const [peer, entry] of this.#table) {
      const keepMs = entry.refused ? Math.max(entry.ttlMs, REFUSED_MEMORY_MS) : entry.ttlMs;
      if (!isFresh(entry, now, keepMs)) this.#table.delete(peer);
    }
  }
}

/** Whether an entry counts now: alive, and its latest record not refused. */
function live(entry: TableEntry, now: number): boolean {
  return !entry.refused && isFresh(entry, now, entry.ttlMs);
}

function positive(value: number, name: string): number {
  if (!Number.isFinite(value) || value <= 0) {
    throw new SwarmError(SwarmErrorCode.MALFORMED_MESSAGE, `${name} must be a positive number, got ${value}`);
  }
  return value;
}

/**
 * The record without the fields that never carry over (see `report`); `previous` only within an
 * epoch. `paused` is the tracker's own (see `setPaused`).
 */
function carriedOver(record: ProgressRecord, sameEpoch: boolean): Partial<ProgressRecord> {
  const { averagingEpoch: _inFlight, paused: _held, previous, ...rest } = record;
  return sameEpoch && previous !== undefined ? { ...rest, previous } : rest;
}
