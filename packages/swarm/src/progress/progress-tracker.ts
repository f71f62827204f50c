import type { PeerRole } from "@barnraise/protocol";
import { SwarmError, SwarmErrorCode } from "../errors.ts";
import type { PeerIdString, Rpc, RpcIncoming, RpcPeer } from "../rpc/rpc.ts";
import {
  progressMethod,
  progressRecordSchema,
  sessionSchema,
  type ProgressMode,
  type ProgressRecord,
} from "./progress-messages.ts";
import {
  estimateSwarm,
  generationOf,
  isFresh,
  type ReceivedProgress,
  type SwarmEstimate,
} from "./swarm-estimate.ts";

/** The slice of a pino logger the tracker uses. */
export interface ProgressLogger {
  debug(fields: object, message: string): void;
}

export interface ProgressTrackerOptions {
  readonly rpc: Rpc;
  /** The peers currently connected and authorized; each push goes to all of them. */
  readonly peers: () => readonly PeerIdString[];
  /** Samples the swarm accumulates per optimizer step. */
  readonly targetBatchSize: number;
  /** Push period; default 1000 ms. */
  readonly intervalMs?: number;
  /** A record received longer ago than this is dead; default 3 × intervalMs + 2 s. */
  readonly ttlMs?: number;
  /** Time limit of one push; default max(intervalMs, 2 s). */
  readonly callTimeoutMs?: number;
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

interface TableEntry {
  readonly peerId: PeerIdString;
  username: string;
  role: PeerRole;
  record: ProgressRecord;
  receivedAt: number;
  /** Token bucket of the per-peer rate cap: records it may still send now, and when that was computed. */
  tokens: number;
  tokensAt: number;
}

/**
 * Progress tracking (DeDLOC §3.1): pushes this node's signed progress to every connected peer,
 * keeps the latest record of each peer (keyed by the authenticated sender, never by the body), and
 * estimates the swarm's total toward the target batch size. Also serves as the optimizer's
 * progress port (`report`, `global`) and as the aux monitor's source of per-peer metrics.
 */
export class ProgressTracker {
  readonly #rpc: Rpc;
  readonly #peers: () => readonly PeerIdString[];
  readonly #target: number;
  readonly #intervalMs: number;
  readonly #ttlMs: number;
  readonly #callTimeoutMs: number;
  readonly #maxPeers: number;
  readonly #ratePerSecond: number;
  readonly #burst: number;
  readonly #mode: () => ProgressMode;
  readonly #session: string | undefined;
  readonly #link: ProgressTrackerOptions["link"];
  readonly #now: () => number;
  readonly #logger: ProgressLogger | undefined;
  readonly #table = new Map<PeerIdString, TableEntry>();
  readonly #listeners = new Set<ProgressListener>();
  /** One in-flight push per peer; `again` asks for one more with the latest record when it ends. */
  readonly #sending = new Map<PeerIdString, { again: boolean; done: Promise<void> }>();
  #local: ReceivedProgress | null = null;
  #timer: ReturnType<typeof setInterval> | undefined;
  #stopping: AbortController | undefined;

  constructor(options: ProgressTrackerOptions) {
    this.#rpc = options.rpc;
    this.#peers = options.peers;
    this.#target = positive(options.targetBatchSize, "targetBatchSize");
    this.#intervalMs = positive(options.intervalMs ?? 1000, "intervalMs");
    this.#ttlMs = positive(options.ttlMs ?? 3 * this.#intervalMs + 2000, "ttlMs");
    this.#callTimeoutMs = positive(
      options.callTimeoutMs ?? Math.max(this.#intervalMs, 2000),
      "callTimeoutMs",
    );
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
  }

  /** Serves the "progress" rpc and starts pushing every `intervalMs`. */
  start(): void {
    if (this.#stopping !== undefined) return;
    this.#stopping = new AbortController();
    this.#rpc.handle(progressMethod, (incoming) => this.#receive(incoming));
    this.#timer = setInterval(() => void this.pushNow(), this.#intervalMs);
    this.#timer.unref();
  }

  /** Stops serving and pushing; in-flight pushes are aborted. Records stay readable. */
  stop(): void {
    if (this.#stopping === undefined) return;
    clearInterval(this.#timer);
    this.#timer = undefined;
    this.#rpc.unhandle(progressMethod);
    this.#stopping.abort(new SwarmError(SwarmErrorCode.ABORTED, "progress tracker stopped"));
    this.#stopping = undefined;
  }

  /**
   * Updates this node's record. Left-out fields keep their previous values, except that `lossSum`
   * and `minibatches` restart at 0 and `previous` is dropped with a new epoch, `averagingEpoch` is
   * dropped unless given, `step` defaults to `epoch` and `time` to now. The session given at
   * construction is put into every record.
   * Pushes at once when the epoch changes. Throws MALFORMED_MESSAGE for an invalid record.
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
    };
    const parsed = progressRecordSchema.safeParse(candidate);
    if (!parsed.success) {
      const issues = parsed.error.issues.map((issue) => `${issue.path.join(".")}: ${issue.message}`);
      throw new SwarmError(SwarmErrorCode.MALFORMED_MESSAGE, `invalid local progress: ${issues.join("; ")}`);
    }
    this.#local = { peerId: this.#rpc.peerId, record: parsed.data, receivedAt: now };
    if (!sameEpoch && this.#stopping !== undefined) void this.pushNow();
  }

  /**
   * Pushes the latest local record to every connected peer in parallel and resolves when all
   * pushes are done. Never rejects: failures are logged at debug. A peer with a push in flight gets
   * one more push with the latest record right after it, never two at once.
   */
  async pushNow(): Promise<void> {
    this.#expire();
    if (this.#local === null) return;
    const self = this.#rpc.peerId;
    let connected: readonly PeerIdString[];
    try {
      connected = this.#peers();
    } catch (error) {
      this.#logger?.debug({ err: error }, "listing peers for a progress push failed");
      return;
    }
    const targets = [...new Set(connected)].filter((peer) => peer !== self);
    await Promise.all(targets.map((peer) => this.#pushTo(peer)));
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
   * The swarm estimate at this moment (DeDLOC §3.1): trainers of this node's generation only.
   * With `epoch`, the estimate for that epoch as if it were the swarm's.
   */
  snapshot(epoch?: number): SwarmEstimate {
    return estimateSwarm({
      peers: [...this.#table.values()],
      local: this.#local,
      now: this.#now(),
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
    for (const { peerId, username, role, record, receivedAt } of this.#table.values()) {
      if (!isFresh({ receivedAt }, now, this.#ttlMs)) continue;
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

  #pushTo(peer: PeerIdString): Promise<void> {
    const inFlight = this.#sending.get(peer);
    if (inFlight !== undefined) {
      inFlight.again = true;
      return inFlight.done;
    }
    const state = { again: true, done: Promise.resolve() };
    state.done = (async () => {
      try {
        while (state.again && this.#stopping?.signal.aborted === false) {
          state.again = false;
          await this.#send(peer);
        }
      } finally {
        this.#sending.delete(peer);
      }
    })();
    this.#sending.set(peer, state);
    return state.done;
  }

  async #send(peer: PeerIdString): Promise<void> {
    const record = this.#local?.record;
    if (record === undefined) return;
    try {
      await this.#rpc.request(peer, progressMethod, record, {
        timeoutMs: this.#callTimeoutMs,
        signal: this.#stopping?.signal,
      });
    } catch (error) {
      this.#logger?.debug({ peer, err: error }, "progress push failed");
    }
  }

  async #receive(incoming: RpcIncoming<ProgressRecord, { ok: true }>): Promise<void> {
    this.#accept(incoming.from, incoming.head);
    await incoming.respond({ ok: true });
  }

  #accept(from: RpcPeer, record: ProgressRecord): void {
    if (from.peerId === this.#rpc.peerId) return;
    const now = this.#now();
    let entry = this.#table.get(from.peerId);
    if (entry === undefined) {
      if (this.#table.size >= this.#maxPeers) this.#expire();
      if (this.#table.size >= this.#maxPeers) {
        this.#logger?.debug({ peer: from.peerId }, "progress table full, record dropped");
        return;
      }
      entry = {
        peerId: from.peerId,
        username: from.pass.username,
        role: from.pass.role,
        record,
        receivedAt: now,
        tokens: this.#burst,
        tokensAt: now,
      };
      this.#table.set(from.peerId, entry);
    } else {
      const refill = (Math.max(0, now - entry.tokensAt) / 1000) * this.#ratePerSecond;
      entry.tokens = Math.min(this.#burst, entry.tokens + refill);
      entry.tokensAt = now;
    }
    if (entry.tokens < 1) {
      this.#logger?.debug({ peer: from.peerId }, "progress records arrive too fast, record dropped");
      return;
    }
    entry.tokens -= 1;
    entry.username = from.pass.username;
    entry.role = from.pass.role;
    entry.record = record;
    entry.receivedAt = now;
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
  }

  /** Forgets records that are no longer alive, so the table only holds live peers. */
  #expire(): void {
    const now = this.#now();
    for (const [peer, entry] of this.#table) {
      if (!isFresh(entry, now, this.#ttlMs)) this.#table.delete(peer);
    }
  }
}

function positive(value: number, name: string): number {
  if (!Number.isFinite(value) || value <= 0) {
    throw new SwarmError(SwarmErrorCode.MALFORMED_MESSAGE, `${name} must be a positive number, got ${value}`);
  }
  return value;
}

/** The record without the fields that never carry over (see `report`); `previous` only within an epoch. */
function carriedOver(record: ProgressRecord, sameEpoch: boolean): Partial<ProgressRecord> {
  const { averagingEpoch: _inFlight, previous, ...rest } = record;
  return sameEpoch && previous !== undefined ? { ...rest, previous } : rest;
}
