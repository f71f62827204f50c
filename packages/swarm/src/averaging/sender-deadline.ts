/**
 * How long a reducer waits for a sender's next chunk before it excludes the sender (DeDLOC §3.2: a
 * failed peer must not hold up the round). It follows the network instead of a fixed share of the
 * round's deadline: the slowest sender's chunk takes `chunkBytes × streams / upload` seconds to
 * leave its link (it feeds one stream per reducer at once), and a sender gets SLACK times that,
 * plus BASE_MS for its stream to open and a round trip or two, before it counts as dead. So a dead
 * or frozen member goes within seconds on fast links, a slow but honest one (even one whose link
 * slowed to a tenth of what it announced) is kept, and nothing waits longer than half the round.
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
  /** The round's deadline (`averaging.allreduceTimeoutMs`). */
  readonly roundTimeoutMs: number;
}

export function senderDeadlineMs(input: SenderDeadlineInput): number {
  const cap = input.roundTimeoutMs / 2;
  const upload = input.slowestUploadBytesPerSecond;
  if (!(upload > 0) || !Number.isFinite(upload)) return cap;
  const chunkMs = (input.chunkBytes * Math.max(1, input.streams) * 1000) / upload;
  return Math.min(cap, Math.max(MIN_MS, BASE_MS + SLACK * chunkMs));
}
