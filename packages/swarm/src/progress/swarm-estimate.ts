import type { ProgressRecord } from "./progress-messages.ts";

/** A peer's latest record and when this node received it (on this node's clock). */
export interface ReceivedProgress {
  readonly peerId: string;
  readonly record: ProgressRecord;
  /** Unix ms on the local clock: arrival for remote records, the `report` call for the local one. */
  readonly receivedAt: number;
  /** How long this record stays alive, when its sender's period sets it; else the input's `ttlMs`. */
  readonly ttlMs?: number;
}

export interface SwarmEstimateInput {
  /** Records received from other peers; stale ones are ignored here. */
  readonly peers: readonly ReceivedProgress[];
  /** This node's own record, always counted as alive; `null` before its first report. */
  readonly local: ReceivedProgress | null;
  /** Current Unix ms on the local clock. */
  readonly now: number;
  /** A record received longer ago than this is dead, unless the record names its own lifetime. */
  readonly ttlMs: number;
  readonly targetBatchSize: number;
  /**
   * Estimate for this epoch as if it were the swarm's: only the trainers at it count toward the
   * target and the ETA. Default: the highest epoch among the trainers.
   */
  readonly epoch?: number;
}

/** One alive trainer as the estimate sees it. */
export interface SwarmEstimatePeer {
  readonly peerId: string;
  readonly self: boolean;
  readonly epoch: number;
  readonly samplesAccumulated: number;
  readonly samplesPerSecond: number;
  /** Samples assumed to have been accumulated since the record was measured (0 off the estimated epoch). */
  readonly extrapolatedSamples: number;
  /** Milliseconds since this node received the record. */
  readonly ageMs: number;
  /** Whether the peer is at the estimated epoch, so its samples count toward the target. */
  readonly atGlobalEpoch: boolean;
}

/** The swarm's progress toward the target batch size, as this node estimates it. */
export interface SwarmEstimate {
  /** The highest epoch among alive trainers (this node included), or the epoch asked for. */
  readonly epoch: number;
  /** The run generation the estimate is for: this node's (records of another one are ignored). */
  readonly generation: number;
  /** Samples accumulated for `epoch` across alive trainers, extrapolated to `now`. */
  readonly samplesAccumulated: number;
  readonly targetBatchSize: number;
  /** Seconds until the target is reached at the counted trainers' summed throughput; Infinity if it is 0. */
  readonly etaSeconds: number;
  /** Σ samples/s over the counted trainers (all alive ones; for an epoch asked for, those at it). */
  readonly samplesPerSecond: number;
  /** Alive trainers (node or client mode, not paused) of this generation, this node included unless it is an aux or paused. */
  readonly alivePeers: number;
  /** Alive trainers at `epoch`, this node included when it is one of them. */
  readonly peersAtEpoch: number;
  /** The estimate has reached the target: time to average. */
  readonly readyToAverage: boolean;
  /** The alive trainers, sorted by peer id. */
  readonly peers: readonly SwarmEstimatePeer[];
}

/**
 * Estimates the swarm's total toward the target batch size the way DeDLOC §3.1 does: each alive
 * trainer at the highest epoch contributes its reported samples plus its throughput times the time
 * since it measured them, except one already averaging that epoch (its samples went into the round
 * as it reported them). Extrapolation alone never carries the total past the target (reported
 * samples may).
 *
 * Only trainers that train count: a paused trainer (its volunteer's rules hold it) brings nothing
 * to the epoch until it says it trains again. An aux peer's record names the round it is about to help or the state it
 * serves, never progress of the swarm: counting it kept a swarm whose trainers had all left
 * "ahead" of every newcomer forever. Records of another run generation than this node's (absent
 * means 0) belong to a rolled-back or newer lineage and are ignored entirely.
 *
 * Clocks are not trusted. Staleness uses the local receive time only. The extrapolation interval
 * is the sender-clock age `now − time`, clamped below by the receive age `now − receivedAt` (the
 * record cannot be younger than its arrival) and above by `ttlMs`, so a skewed sender clock costs
 * at most `ttlMs` of extrapolation and never makes it negative. A record sent by a peer that
 * publishes less often (a large swarm) carries its own, longer lifetime: it stays alive and is
 * extrapolated up to that lifetime, so a longer period does not make the total fall short.
 *
 * Pure: every node that holds the same records at the same `now` computes the same estimate.
 */
export function estimateSwarm(input: SwarmEstimateInput): SwarmEstimate {
  const { now, ttlMs, targetBatchSize } = input;
  const generation = generationOf(input.local?.record);
  const trainers: Array<{ entry: ReceivedProgress; self: boolean }> = [];
  const counts = (entry: ReceivedProgress) =>
    entry.record.mode !== "aux" &&
    entry.record.paused === undefined &&
    generationOf(entry.record) === generation;
  for (const entry of input.peers) {
    if (isFresh(entry, now, entry.ttlMs ?? ttlMs) && counts(entry)) trainers.push({ entry, self: false });
  }
  if (input.local !== null && counts(input.local)) trainers.push({ entry: input.local, self: true });

  let epoch = input.epoch ?? 0;
  if (input.epoch === undefined) {
    for (const { entry } of trainers) epoch = Math.max(epoch, entry.record.epoch);
  }

  let reported = 0;
  let extrapolated = 0;
  let samplesPerSecond = 0;
  let peersAtEpoch = 0;
  const peers: SwarmEstimatePeer[] = [];
  for (const { entry, self } of trainers) {
    const { record } = entry;
    const atGlobalEpoch = record.epoch === epoch;
    const receiveAge = Math.max(0, now - entry.receivedAt);
    // A trainer averaging the epoch it reports has handed its samples for it to the round: they
    // are final, and what it computes meanwhile goes to the next step.
    const final = record.averagingEpoch === record.epoch;
    const extra =
      atGlobalEpoch && !final
        ? (record.samplesPerSecond * extrapolationMs(entry, now, entry.ttlMs ?? ttlMs)) / 1000
        : 0;
    // For an epoch asked for, peers elsewhere will not bring samples to it.
    if (input.epoch === undefined || atGlobalEpoch) samplesPerSecond += record.samplesPerSecond;
    if (atGlobalEpoch) {
      reported += record.samplesAccumulated;
      extrapolated += extra;
      peersAtEpoch += 1;
    }
    peers.push({
      peerId: entry.peerId,
      self,
      epoch: record.epoch,
      samplesAccumulated: record.samplesAccumulated,
      samplesPerSecond: record.samplesPerSecond,
      extrapolatedSamples: extra,
      ageMs: receiveAge,
      atGlobalEpoch,
    });
  }
  peers.sort((a, b) => (a.peerId < b.peerId ? -1 : a.peerId > b.peerId ? 1 : 0));

  const samplesAccumulated = Math.max(reported, Math.min(reported + extrapolated, targetBatchSize));
  const remaining = Math.max(0, targetBatchSize - samplesAccumulated);
  const etaSeconds = remaining === 0 ? 0 : samplesPerSecond > 0 ? remaining / samplesPerSecond : Infinity;
  return {
    epoch,
    generation,
    samplesAccumulated,
    targetBatchSize,
    etaSeconds,
    samplesPerSecond,
    alivePeers: trainers.length,
    peersAtEpoch,
    readyToAverage: samplesAccumulated >= targetBatchSize,
    peers,
  };
}

/** A record's run generation; absent means 0. */
export function generationOf(record: Pick<ProgressRecord, "generation"> | undefined): number {
  return record?.generation ?? 0;
}

/** Whether a received record is still alive: received at most `ttlMs` ago on the local clock. */
export function isFresh(entry: Pick<ReceivedProgress, "receivedAt">, now: number, ttlMs: number): boolean {
  return now - entry.receivedAt <= ttlMs;
}

/** Milliseconds of extrapolation for a record, in [receive age, ttlMs]. */
function extrapolationMs(entry: ReceivedProgress, now: number, ttlMs: number): number {
  const receiveAge = Math.max(0, now - entry.receivedAt);
  const senderAge = now - entry.record.time;
  return Math.min(ttlMs, Math.max(receiveAge, senderAge));
}
