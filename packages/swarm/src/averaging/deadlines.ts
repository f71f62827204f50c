/**
 * The averaging deadlines, derived from the network and from what recent rounds took instead of
 * fixed numbers (hivemind #676: a slow but honest peer must not be dropped, a dead one must go
 * quickly). Three of them:
 *
 * - **Sender** (`senderDeadlineMs`): how long a reducer waits for a sender's next chunk before it
 *   excludes the sender (DeDLOC §3.2: a failed peer must not hold up the round). The slowest
 *   sender's chunk takes `chunkBytes × streams / upload` seconds to leave its link (it feeds one
 *   stream per reducer at once); a sender gets SLACK times that, plus BASE_MS for its stream to open
 *   and a round trip or two, before it counts as dead. So a dead or frozen member goes within
 *   seconds on fast links, and a slow but honest one (even one whose link slowed to a tenth of what
 *   it announced) is kept.
 * - **Round** (`roundDeadlineMs`): the whole all-reduce. It is only a backstop (dead members are
 *   dropped by the sender deadline, silent reducers a little after it), so it is generous: the
 *   model's time for the group's vector over the members' measured links, times the larger of 4
 *   and twice the slowest recent round's measured-to-modelled ratio, and never less than the
 *   config's `allreduceTimeoutMs`. A large model on slow links thus gets the time it needs.
 * - **Gathering** (`gatheringDeadlineMs`): how long a matchmaking leader waits for members it
 *   expects. Members arrive spread over the time it takes to finish a minibatch and to hear of the
 *   swarm's progress; the leader keeps the recent spreads (and how late stragglers came) and waits
 *   three times the largest of them, within the config's `matchmakingTimeoutMs`, so a member that
 *   died mid-step costs seconds rather than the whole timeout.
 */

/** How many times the expected time a chunk may take. */
const SLACK = 20;
/** Added for the stream's opening and a few round trips. */
const BASE_MS = 2_000;
/** Never less than this (a loaded machine pauses for seconds), unless half the round is less. */
const MIN_MS = 5_000;

export interface SenderDeadlineInput {
  /** Encoded bytes per chunk (`averaging.chunkSizeBytes`). */
  readonly chunkBytes: number;
  /** Streams each sender feeds at once: the reducers other than itself. */
  readonly streams: number;
  /** The slowest sender's upload rate, bytes per second (measured, see LinkMeter). */
  readonly slowestUploadBytesPerSecond: number;
  /** The round's deadline (`roundDeadlineMs`). */
  readonly roundTimeoutMs: number;
}

export function senderDeadlineMs(input: SenderDeadlineInput): number {
  const cap = input.roundTimeoutMs / 2;
  const upload = input.slowestUploadBytesPerSecond;
  if (!(upload > 0) || !Number.isFinite(upload)) return cap;
  const chunkMs = (input.chunkBytes * Math.max(1, input.streams) * 1000) / upload;
  return Math.min(cap, Math.max(MIN_MS, BASE_MS + SLACK * chunkMs));
}

/** A round may take at least this many times the model's time… */
const ROUND_SLACK = 4;
/** …and this many times the slowest recent round's ratio of measured to modelled time. */
const ROUND_HISTORY_SLACK = 2;
/** Added for matchmaking's answer to reach everyone and the streams to open. */
const ROUND_BASE_MS = 5_000;
/** The most a round is ever given (the config's own upper limit). */
export const ROUND_MAX_MS = 3_600_000;

export interface RoundDeadlineInput {
  /** The model's time for this round (`predictedAllReduceSeconds` on the members' measured links). */
  readonly predictedSeconds: number;
  /** Measured ÷ modelled time of this peer's recent successful rounds. */
  readonly recentRatios: readonly number[];
  /** The least a round is given (`averaging.allreduceTimeoutMs`). */
  readonly floorMs: number;
}

export function roundDeadlineMs(input: RoundDeadlineInput): number {
  const predictedMs = input.predictedSeconds * 1000;
  if (!(predictedMs >= 0) || !Number.isFinite(predictedMs)) return input.floorMs;
  const ratios = input.recentRatios.filter((ratio) => Number.isFinite(ratio) && ratio > 0);
  const slack = Math.max(ROUND_SLACK, ROUND_HISTORY_SLACK * Math.max(0, ...ratios));
  return Math.round(Math.min(ROUND_MAX_MS, Math.max(input.floorMs, ROUND_BASE_MS + slack * predictedMs)));
}

/** A leader waits this many times the largest recent spread of arrivals… */
const GATHERING_SLACK = 3;
/** …plus this much… */
const GATHERING_BASE_MS = 2_000;
/** …and never less than this (a minibatch on a loaded machine can stall for seconds). */
const GATHERING_MIN_MS = 5_000;
/** Spreads from this many gatherings are needed before the history replaces the config's timeout. */
export const GATHERING_HISTORY_MIN = 3;

export interface GatheringDeadlineInput {
  /** How long after a gathering opened its last member arrived, in recent gatherings (ms). */
  readonly recentSpreadsMs: readonly number[];
  /** The most a gathering waits (`averaging.matchmakingTimeoutMs`). */
  readonly capMs: number;
}

export function gatheringDeadlineMs(input: GatheringDeadlineInput): number {
  const spreads = input.recentSpreadsMs.filter((spread) => Number.isFinite(spread) && spread >= 0);
  if (spreads.length < GATHERING_HISTORY_MIN) return input.capMs;
  const wait = GATHERING_BASE_MS + GATHERING_SLACK * Math.max(...spreads);
  return Math.round(Math.min(input.capMs, Math.max(GATHERING_MIN_MS, wait)));
}
