import type { ProgressRecord } from "./progress-messages.ts";

/** A peer's latest record and when this node received it (on this node's clock). */
export interface ReceivedProgress {
  readonly peerId: string;
  readonly record: ProgressRecord;
  /** Unix ms on the local clock: arrival for remote records, the `report` call for the local one. */
  readonly receivedAt: number;
}

export interface SwarmEstimateInput {
  /** Records received from other peers; stale ones are ignored here. */
  readonly peers: readonly ReceivedProgress[];
  /** This node's own record, always counted as alive; `null` before its first report. */
  readonly local: ReceivedProgress | null;
  /** Current Unix ms on the local clock. */
  readonly now: number;
  /** A record received longer ago than this is dead. */
  readonly ttlMs: number;
  readonly targetBatchSize: number;
}

/** One alive peer as the estimate sees it. */
export interface SwarmEstimatePeer {
  readonly peerId: string;
  readonly self: boolean;
  readonly epoch: number;
  readonly samplesAccumulated: number;
  readonly samplesPerSecond: number;
  /** Samples assumed to have been accumulated since the record was measured (0 off the global epoch). */
  readonly extrapolatedSamples: number;
  /** Milliseconds since this node received the record. */
  readonly ageMs: number;
  /** Whether the peer is at the swarm's epoch, so its samples count toward the target. */
  readonly atGlobalEpoch: boolean;
}

/** The swarm's progress toward the target batch size, as this node estimates it. */
export interface SwarmEstimate {
  /** The highest epoch among alive peers (this node included). */
  readonly epoch: number;
  /** Samples accumulated for `epoch` across alive peers, extrapolated to `now`. */
  readonly samplesAccumulated: number;
  readonly targetBatchSize: number;
  /** Seconds until the target is reached at the alive peers' summed throughput; Infinity if it is 0. */
  readonly etaSeconds: number;
  /** Σ samples/s over alive peers. */
  readonly samplesPerSecond: number;
  readonly alivePeers: number;
  /** The estimate has reached the target: time to average. */
  readonly readyToAverage: boolean;
  readonly peers: readonly SwarmEstimatePeer[];
}

/**
 * Estimates the swarm's total toward the target batch size the way DeDLOC §3.1 does: each alive
 * peer at the highest epoch contributes its reported samples plus its throughput times the time
 * since it measured them. Extrapolation alone never carries the total past the target (reported
 * samples may).
 *
 * Clocks are not trusted. Staleness uses the local receive time only. The extrapolation interval
 * is the sender-clock age `now − time`, clamped below by the receive age `now − receivedAt` (the
 * record cannot be younger than its arrival) and above by `ttlMs`, so a skewed sender clock costs
 * at most `ttlMs` of extrapolation and never makes it negative.
 *
 * Pure: every node that holds the same records at the same `now` computes the same estimate.
 */
export function estimateSwarm(input: SwarmEstimateInput): SwarmEstimate {
  const { now, ttlMs, targetBatchSize } = input;
  const alive: Array<{ entry: ReceivedProgress; self: boolean }> = [];
  for (const entry of input.peers) {
    if (isFresh(entry, now, ttlMs)) alive.push({ entry, self: false });
  }
  if (input.local !== null) alive.push({ entry: input.local, self: true });

  let epoch = 0;
  for (const { entry } of alive) epoch = Math.max(epoch, entry.record.epoch);

  let reported = 0;
  let extrapolated = 0;
  let samplesPerSecond = 0;
  const peers: SwarmEstimatePeer[] = [];
  for (const { entry, self } of alive) {
    const { record } = entry;
    const atGlobalEpoch = record.epoch === epoch;
    const receiveAge = Math.max(0, now - entry.receivedAt);
    const extra = atGlobalEpoch ? (record.samplesPerSecond * extrapolationMs(entry, now, ttlMs)) / 1000 : 0;
    samplesPerSecond += record.samplesPerSecond;
    if (atGlobalEpoch) {
      reported += record.samplesAccumulated;
      extrapolated += extra;
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
    samplesAccumulated,
    targetBatchSize,
    etaSeconds,
    samplesPerSecond,
    alivePeers: alive.length,
    readyToAverage: samplesAccumulated >= targetBatchSize,
    peers,
  };
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
