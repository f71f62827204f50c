import { type PeerRole, pauseReasonsSchema } from "@barnraise/protocol";
import { z } from "zod";
import { SwarmError, SwarmErrorCode } from "../errors.ts";
import { STATE_DIGEST_PATTERN } from "../state/state-digest.ts";
import { defineMethod } from "../rpc/rpc.ts";

/** Largest epoch, step, sample or minibatch count a record may carry (2^48, far above any real run). */
export const MAX_PROGRESS_COUNT = 2 ** 48;
/** Largest throughput a record may claim, in samples per second. */
export const MAX_SAMPLES_PER_SECOND = 1e9;
/** Largest summed loss a record may carry. */
export const MAX_LOSS_SUM = 1e15;
/** Largest link capacity a record may claim: 1 Tbit/s. */
export const MAX_LINK_BYTES_PER_SECOND = 125e9;
/** Largest cumulative compute time a record may claim (about 30,000 years). */
export const MAX_COMPUTE_SECONDS = 1e12;

/** Longest publish period a record may name (see ProgressTracker): 30 s. */
export const MAX_PERIOD_MS = 30_000;

const count = z.number().int().min(0).max(MAX_PROGRESS_COUNT);

/** Longest session id a record may carry. */
export const MAX_SESSION_LENGTH = 32;

/** A peer's session: a random id per process start, so a restarted node keeps each session's credit. */
export const sessionSchema = z
  .string()
  .min(1)
  .max(MAX_SESSION_LENGTH)
  .regex(/^[A-Za-z0-9_-]+$/, "must be letters, digits, '_' or '-'");

/**
 * How a peer takes part: `node` trains and accepts connections, `client` trains but cannot accept
 * connections (it reduces nothing), `aux` reduces but contributes no samples. An aux record says
 * nothing about the swarm's epoch: its `epoch` is the round it is about to help average
 * (`averagingEpoch` set too) or the epoch of the state it serves (`stateEpoch`).
 */
export const ProgressMode = { node: "node", client: "client", aux: "aux" } as const;
export type ProgressMode = (typeof ProgressMode)[keyof typeof ProgressMode];

/**
 * One peer's progress toward the current epoch's target batch size (DeDLOC §3.1), plus the metrics
 * the aux monitor collects (Appendix I.2). It names no peer: the receiver keys it by the sender the
 * signed rpc layer authenticated, so a peer can only ever speak for itself.
 */
export const progressRecordSchema = z.strictObject({
  /** The epoch (optimizer step) this peer is accumulating gradients for. */
  epoch: count,
  /** Samples this peer has accumulated toward `epoch` so far. */
  samplesAccumulated: count,
  /** This peer's recent training throughput. */
  samplesPerSecond: z.number().min(0).max(MAX_SAMPLES_PER_SECOND),
  /** When `samplesAccumulated` was measured: Unix time in milliseconds on the sender's clock. */
  time: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER),
  mode: z.enum([ProgressMode.node, ProgressMode.client, ProgressMode.aux]),
  /** Sum of the minibatch losses of this epoch, so that loss = Σ lossSum / Σ minibatches over peers. */
  lossSum: z.number().min(0).max(MAX_LOSS_SUM),
  /** Minibatches this peer has processed in this epoch. */
  minibatches: count,
  /** The global step; equal to `epoch` for now, kept apart so the two may diverge later. */
  step: count,
  /** Total bytes this peer has aggregated for others as a reducer (cumulative). */
  bytesAggregated: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER),
  /**
   * The epoch whose all-reduce this peer is in: `epoch` itself when a round starts (the record then
   * carries the round's samples), or, with delayed parameter updates, the one it runs in the
   * background while it accumulates `epoch` (one less); absent when no round runs.
   */
  averagingEpoch: count.optional(),
  /**
   * Samples this peer has put into collaborative steps since it started (cumulative), for the
   * leaderboard: samples of a step it took alone while others trained do not count.
   */
  samplesTotal: count.optional(),
  /** Seconds this peer has spent computing gradients since it started (cumulative). */
  computeSeconds: z.number().min(0).max(MAX_COMPUTE_SECONDS).optional(),
  /**
   * The final loss totals of the epoch this peer accumulated before `epoch`: a step can be short
   * next to the push period, so the aux monitor would otherwise miss the end of each epoch.
   */
  previous: z
    .strictObject({
      epoch: count,
      lossSum: z.number().min(0).max(MAX_LOSS_SUM),
      minibatches: count,
      /** Seconds this peer spent computing gradients in that epoch. */
      computeSeconds: z.number().min(0).max(MAX_COMPUTE_SECONDS).optional(),
      /** Wall seconds this peer spent in that epoch (from reaching it to reaching the next). */
      wallSeconds: z.number().min(0).max(MAX_COMPUTE_SECONDS).optional(),
    })
    .optional(),
  /**
   * This peer's latest finished all-reduce: the epoch it averaged and the bytes this peer wrote on
   * the wire for it. Kept until the next one ends, so it reaches the aux monitor even when the round
   * ends long after its epoch (delayed updates).
   */
  round: z
    .strictObject({
      epoch: count,
      bytesSent: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER),
    })
    .optional(),
  /**
   * The run generation (rollbacks so far) of this peer's state; absent means 0. Peers ignore the
   * records of another generation than their own.
   */
  generation: count.optional(),
  /**
   * Aux peers: the epoch of the state they serve to others (their latest checkpoint), so a peer
   * that finds no trainer to download from can load it.
   */
  stateEpoch: count.optional(),
  /**
   * How often the sender publishes its record now, in ms: receivers keep the record alive for
   * three such periods. Set on the wire only; stored records leave it out.
   */
  periodMs: z.number().int().min(1).max(MAX_PERIOD_MS).optional(),
  /** The peer's session (a random id per process start), for per-session credit. */
  session: sessionSchema.optional(),
  /**
   * Trainers: the fingerprint of the shared state they hold (see `stateDigest`) and the epoch it
   * belongs to. The aux compares them: two digests at one epoch mean two models (a split swarm).
   */
  stateHash: z
    .strictObject({
      epoch: count,
      digest: z.string().regex(STATE_DIGEST_PATTERN, "must be 16 lowercase hex digits"),
      /** The step averaged over a Moshpit grid: groups hold different bits, so digests differ. */
      grid: z.boolean().optional(),
    })
    .optional(),
  /** Trainers: steps in a row applied with no other trainer's samples in them. */
  soloSteps: count.optional(),
  /**
   * Trainers: why the volunteer's rules hold this trainer now (the machine is in use, on battery,
   * …); absent while it trains. A paused trainer brings nothing to the current epoch: it counts
   * toward no estimate and no group, and nobody waits for it. It keeps its state, its record stays
   * alive, and it trains again when the record no longer says so.
   */
  paused: pauseReasonsSchema.optional(),
  /** The peer's link capacity as it knows it (see LinkMeter), in bytes per second, and from where. */
  link: z
    .strictObject({
      uploadBytesPerSecond: z.number().min(0).max(MAX_LINK_BYTES_PER_SECOND),
      downloadBytesPerSecond: z.number().min(0).max(MAX_LINK_BYTES_PER_SECOND),
      source: z.enum(["default", "configured", "probe", "traffic"]),
    })
    .optional(),
});

export type ProgressRecord = z.infer<typeof progressRecordSchema>;

/**
 * Refuses a record that does not fit the role of the pass it came with (MALFORMED_MESSAGE, saying
 * what does not fit); every transport applies it to each record it receives, before the tracker
 * sees it. The pass is checked by the transport; this checks what the record claims with it:
 * - an aux reduces and serves state but trains nothing: its record is in aux mode and claims no
 *   samples, throughput, loss or compute. What it legitimately reports is the epoch it helps
 *   average (`averagingEpoch`) or serves (`stateEpoch`), `bytesAggregated` and its `round`; a
 *   trainer's state fingerprint (`stateHash`, `soloSteps`) is not its to claim either. A
 *   record of an aux pass in node mode, or with trainer samples, would count toward the swarm's
 *   progress (DeDLOC §3.1) and the leaderboard's credit as a trainer's.
 * - a trainer's record is never in aux mode (matchmaking refuses aux mode to trainer passes too).
 */
export function checkRecordRole(record: ProgressRecord, role: PeerRole): void {
  const misfits = role === "aux" ? auxMisfits(record) : record.mode === "aux" ? ["mode aux"] : [];
  if (misfits.length > 0) {
    throw new SwarmError(
      SwarmErrorCode.MALFORMED_MESSAGE,
      `a progress record from ${role === "aux" ? "an aux" : "a trainer"} pass cannot claim ${misfits.join(", ")}`,
    );
  }
}

/** What an aux record claims that only a trainer may. */
function auxMisfits(record: ProgressRecord): string[] {
  const claims: Array<[string, number | undefined]> = [
    ["samplesAccumulated", record.samplesAccumulated],
    ["samplesPerSecond", record.samplesPerSecond],
    ["samplesTotal", record.samplesTotal],
    ["lossSum", record.lossSum],
    ["minibatches", record.minibatches],
    ["computeSeconds", record.computeSeconds],
    ["previous.lossSum", record.previous?.lossSum],
    ["previous.minibatches", record.previous?.minibatches],
    ["previous.computeSeconds", record.previous?.computeSeconds],
    ["soloSteps", record.soloSteps],
    ["paused", record.paused?.length],
    ["stateHash", record.stateHash === undefined ? undefined : 1],
  ];
  const misfits = claims.flatMap(([field, value]) =>
    value !== undefined && value > 0 ? [`${field} ${value}`] : [],
  );
  return record.mode === "aux" ? misfits : [`mode ${record.mode}`, ...misfits];
}

/**
 * The unary "progress" rpc of direct delivery (RpcProgressTransport): a peer pushes its latest
 * record to each peer it is connected to; the receiver stores it and answers `{ ok: true }`. No
 * frames follow the heads. The engine gossips records instead (GossipProgressTransport).
 */
export const progressMethod = defineMethod({
  name: "progress",
  request: progressRecordSchema,
  response: z.strictObject({ ok: z.literal(true) }),
  maxFrameBytes: 1024,
});
