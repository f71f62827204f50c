import { pino, type Logger } from "pino";
import { compressorFor, type CodecName, type CompressionMethodName } from "../compression/index.ts";
import { SwarmError, SwarmErrorCode, isSwarmError } from "../errors.ts";
import type { Rpc, RpcIncoming } from "../rpc/rpc.ts";
import {
  allReduceMethod,
  type AllReduceRequest,
  type AllReduceResponse,
  checkRequest,
} from "./allreduce-messages.ts";
import { exchangePart, RoundTripFloor, type PartExchangeOutcome } from "./part-exchange.ts";
import { type AllReduceGroup, chunkElementsFor, planRound, type RoundPlan } from "./partition.ts";
import { PeerActivity } from "./peer-activity.ts";
import {
  type ChunkContribution,
  type ExclusionReason,
  type ReducerOutcome,
  ReducerSession,
} from "./reducer-session.ts";
import { stallAwareTimeout } from "../time/stall-aware-timeout.ts";
import type { Aggregator } from "./aggregation/aggregator.ts";

export interface AllReduceServiceOptions {
  rpc: Rpc;
  logger?: Logger;
  /** How long a stream that arrives before the local round started waits for it; default 10 s. */
  sessionWaitMs?: number;
}

export interface AllReduceRunOptions {
  group: AllReduceGroup;
  /** Elements reduced by each member (e.g. `partElementCounts(length, group.fractions)`), summing to the vector's length. */
  partCounts: readonly number[];
  /** The local vector; never modified. Aux members pass any vector of the right length (only its length is used). */
  vector: Float32Array;
  /** The local weight (samples); positive exactly when the group lists a positive weight for this member. */
  weight: number;
  /**
   * The round's codec: a config method, or a codec by name (e.g. "sparse" for rounds that average
   * results of a topk round). Every member of the group must pass the same.
   */
  compression: {
    method: CompressionMethodName | CodecName;
    adaptiveThreshold?: number;
    topkDensity?: number;
  };
  /**
   * Error feedback: as long as `vector` and not overlapping it. When given, this member's own part
   * goes through the codec too (compressed and decoded locally, per chunk, before it is summed),
   * so its contribution is as sparse as everyone else's, and on success `residual[i]` is
   * `vector[i]` minus what the group received of it (see `compressWithFeedback`): element by
   * element, what this member's contribution lost to the codec. A member that contributes nothing
   * (weight 0, aux) gets its vector back as the residual. Its contents are unspecified when the
   * round fails. Without it every part but the own one is compressed, and the own part is summed
   * exactly.
   */
  residual?: Float32Array;
  /**
   * How this member reduces its part (see `Aggregator`); default the weighted mean. Each reducer
   * applies its own, so every member of the group should pass the same.
   */
  aggregator?: Aggregator;
  /**
   * Told each remote sender's decoded values for each chunk of this member's part just before its
   * reducer aggregates them (see `ReducerSessionOptions.onContribution`); never called on a member
   * that reduces no part. Absent: the reducer copies and calls nothing.
   */
  onContribution?: (contribution: ChunkContribution) => void;
  /** Checks each sender's declared weight at this member's reducer (see `ReducerSessionOptions.earnedWeight`). */
  earnedWeight?: (peerId: string, declared: number, signal: AbortSignal) => Promise<number>;
  /** Caps each weight in this member's aggregate (see `ReducerSessionOptions.maxWeightRatio`). */
  maxWeightRatio?: number;
  /** Encoded payload bytes per streamed chunk (see `chunkElementsFor`). */
  chunkSizeBytes: number;
  /** Chunks a sender writes ahead of the results it has read back; default 6 (the experiment config's default). */
  chunksInFlight?: number;
  /**
   * The most chunks that window may grow to, following each stream's bandwidth-delay product (see
   * `WindowControl`); default `chunksInFlight`, a fixed window.
   */
  maxChunksInFlight?: number;
  /**
   * This member's upload rate in bytes per second (measured, see LinkMeter): each stream's window
   * grows by its share of it times the stream's round trip. Absent: a fixed window.
   */
  uploadBytesPerSecond?: number;
  /** Deadline for the whole round. */
  timeoutMs: number;
  /**
   * A sender that delivers nothing for this long while its reducer waits is excluded; default
   * timeoutMs / 2. A reducer that returns no result for 2 s longer fails its part (it is frozen or
   * cut off), so the round fails within seconds and is retried with a new group.
   */
  senderTimeoutMs?: number;
  signal?: AbortSignal;
}

export interface AllReduceResult {
  /** The weighted mean, bit-identical on every member; empty for aux members (they take no result). */
  vector: Float32Array;
  /** The smallest Σ w_i of any chunk this member received or reduced (the full weight when nobody was excluded). */
  totalWeight: number;
  /** Contributors whose weight was left out of at least one of those chunks, in member order. */
  excluded: string[];
  /**
   * Why, for each of `excluded` (same order): the reason this member's reducer left it out, or
   * "elsewhere" when only other reducers did (their reasons are not sent).
   */
  exclusions: { peer: string; reason: ExclusionReason | "elsewhere" }[];
  /** Bytes written and read on the wire (compressed, with frame headers). */
  bytesSent: number;
  bytesReceived: number;
  /** Raw float32 bytes of other members' contributions this member reduced (DeDLOC I.2 "bytes aggregated"). */
  bytesAggregated: number;
  /** The largest window (chunks ahead of their results) any of this member's streams used; 0 when it sent none. */
  largestWindow: number;
}

const FINISHED_ROUNDS_KEPT = 256;
/** How much longer than the sender deadline a sender waits for its reducer's next result. */
const RESULT_SLACK_MS = 2_000;
const DEFAULT_CHUNKS_IN_FLIGHT = 6;
const MAX_WAITING_STREAMS = 1024;

interface ActiveRound {
  plan: RoundPlan;
  chunkElements: number;
  reducer: ReducerSession | undefined;
}

/**
 * Butterfly all-reduce (thesis Fig. 6, DeDLOC §3.2) over the `Rpc` layer. `start()` serves the
 * single "allreduce" method; `run()` takes part in one round: member j reduces part j, every
 * participant streams its part j to member j and reads the average back on the same stream.
 * Client-mode members only dial out; reducers only accept. A failed sender is excluded and
 * renormalized away by each reducer; a failed reducer makes `run` reject with ALLREDUCE_FAILED
 * on the members missing its part, so the caller can retry with a new group. On such a failure
 * this member withdraws its remaining uploads but keeps reducing its own part for the others;
 * `run` settles once that work is done too. A member that a reducer refused for what it sent
 * (non-finite values, a malformed or late chunk) rejects with that reducer's ALLREDUCE_REFUSED and
 * still serves the others its part, the refusing reducer included: the others' rounds complete
 * without its weight.
 */
export class AllReduceService {
  readonly #rpc: Rpc;
  readonly #logger: Logger;
  readonly #sessionWaitMs: number;
  readonly #rounds = new Map<string, ActiveRound>();
  readonly #finished = new Set<string>();
  readonly #waiting = new Map<string, Set<PromiseWithResolvers<ActiveRound>>>();
  readonly #roundTrips = new RoundTripFloor();
  #waitingCount = 0;
  #started = false;

  constructor(options: AllReduceServiceOptions) {
    this.#rpc = options.rpc;
    this.#logger = options.logger ?? pino({ level: "silent" });
    this.#sessionWaitMs = options.sessionWaitMs ?? 10_000;
  }

  start(): void {
    if (this.#started) return;
    this.#started = true;
    this.#rpc.handle(allReduceMethod, (incoming) => this.#handle(incoming));
  }

  stop(): void {
    if (!this.#started) return;
    this.#started = false;
    this.#rpc.unhandle(allReduceMethod);
    for (const waiters of this.#waiting.values()) {
      for (const waiter of waiters) {
        waiter.reject(new SwarmError(SwarmErrorCode.NOT_RUNNING, "the all-reduce service stopped"));
      }
    }
    this.#waiting.clear();
    this.#waitingCount = 0;
  }

  /** Rounds this member is taking part in right now (for monitoring and tests). */
  activeRounds(): number {
    return this.#rounds.size;
  }

  /** Takes part in one round; see the class comment. */
  async run(options: AllReduceRunOptions): Promise<AllReduceResult> {
    const { group, vector, weight, timeoutMs } = options;
    const senderTimeoutMs = options.senderTimeoutMs ?? timeoutMs / 2;
    const plan = planRound(group, options.partCounts, vector.length, this.#rpc.peerId);
    const self = plan.selfIndex;
    checkLocalInput(plan, options);
    if (this.#rounds.has(group.groupId) || this.#finished.has(group.groupId)) {
      throw new SwarmError(
        SwarmErrorCode.ALLREDUCE_FAILED,
        `round ${group.groupId} already ran on this peer`,
      );
    }
    const compressor = compressorFor(
      options.compression.method,
      vector.length,
      options.compression.adaptiveThreshold,
      options.compression.topkDensity,
    );
    const chunkElements = chunkElementsFor(options.chunkSizeBytes, compressor);
    if (options.signal?.aborted === true) {
      throw new SwarmError(SwarmErrorCode.ABORTED, "all-reduce aborted before it started");
    }
    const round = new AbortController();
    const timer = setTimeout(() => {
      round.abort(
        new SwarmError(
          SwarmErrorCode.TIMEOUT,
          `round ${group.groupId} did not finish within ${timeoutMs} ms`,
        ),
      );
    }, timeoutMs);
    const onAbort = () => {
      round.abort(new SwarmError(SwarmErrorCode.ABORTED, `round ${group.groupId} aborted by the caller`));
    };
    options.signal?.addEventListener("abort", onAbort, { once: true });

    const participant = plan.participants.has(self);
    const contributes = plan.contributors.has(self);
    // Nothing of a member that contributes nothing reaches the group: all of it is left over.
    if (!contributes) options.residual?.set(vector);
    const residual = contributes ? options.residual : undefined;
    const result = new Float32Array(participant ? vector.length : 0);
    const ownPart = plan.parts[self] ?? { start: 0, end: 0 };
    // Whatever any member sends on any of this round's streams shows it alive (see PeerActivity).
    const activity = new PeerActivity();
    const reducer =
      ownPart.end > ownPart.start
        ? new ReducerSession({
            plan,
            chunkElements,
            compressor,
            localValues: contributes ? vector.subarray(ownPart.start, ownPart.end) : undefined,
            ...(residual === undefined
              ? {}
              : { localResidual: residual.subarray(ownPart.start, ownPart.end) }),
            localWeight: weight,
            ...(options.aggregator === undefined ? {} : { aggregator: options.aggregator }),
            ...(options.onContribution === undefined ? {} : { onContribution: options.onContribution }),
            ...(options.earnedWeight === undefined ? {} : { earnedWeight: options.earnedWeight }),
            ...(options.maxWeightRatio === undefined ? {} : { maxWeightRatio: options.maxWeightRatio }),
            onResult: (chunk, values) => {
              if (participant) result.set(values, ownPart.start + chunk.start);
            },
            senderTimeoutMs,
            activity,
            signal: round.signal,
            logger: this.#logger,
          })
        : undefined;
    this.#register(group.groupId, { plan, chunkElements, reducer });
    /** Elements this member sends to others: each stream's share of the upload follows its part's. */
    const sendingElements = plan.parts.reduce(
      (sum, part, j) => (j === self ? sum : sum + part.end - part.start),
      0,
    );
    try {
      // settle() attaches a handler at once, so a failing reducer is never an unhandled rejection.
      const reducing = reducer === undefined ? undefined : settle(reducer.run());
      const uploads = new AbortController();
      const uploadSignal = AbortSignal.any([round.signal, uploads.signal]);
      const exchanges = participant
        ? plan.parts.flatMap((part, j) =>
            j === self || part.end === part.start
              ? []
              : [
                  exchangePart({
                    rpc: this.#rpc,
                    plan,
                    partIndex: j,
                    weight: contributes ? weight : 0,
                    values: vector.subarray(part.start, part.end),
                    ...(residual === undefined ? {} : { residual: residual.subarray(part.start, part.end) }),
                    output: result.subarray(part.start, part.end),
                    chunkElements,
                    chunksInFlight: options.chunksInFlight ?? DEFAULT_CHUNKS_IN_FLIGHT,
                    maxChunksInFlight: Math.max(
                      options.chunksInFlight ?? DEFAULT_CHUNKS_IN_FLIGHT,
                      options.maxChunksInFlight ?? 0,
                    ),
                    streamBytesPerSecond:
                      ((options.uploadBytesPerSecond ?? 0) * (part.end - part.start)) / sendingElements,
                    chunkBytes: options.chunkSizeBytes,
                    roundTrips: this.#roundTrips,
                    // A reducer may itself wait a sender deadline for a slow sender before its next
                    // result; a few seconds more without one, it is frozen or cut off.
                    resultTimeoutMs: Math.min(timeoutMs, senderTimeoutMs + RESULT_SLACK_MS),
                    activity,
                    compressor,
                    signal: uploadSignal,
                    timeoutMs,
                  }).catch((error: unknown) => {
                    // A reducer that failed this exchange on its own is most likely gone: this
                    // member's part stops waiting for its chunks. Not one that refused this member
                    // (it is alive, and excluding it would fail its round for this member's
                    // fault), nor one whose exchange only ended because the uploads were withdrawn.
                    const own =
                      !uploads.signal.aborted && !isSwarmError(error, SwarmErrorCode.ALLREDUCE_REFUSED);
                    uploads.abort(error);
                    if (own) reducer?.excludeMember(j, error);
                    throw error;
                  }),
                ],
          )
        : [];
      const exchanged = await Promise.allSettled(exchanges);
      const reduced = await reducing;
      if (round.signal.aborted) throw roundFailure(group.groupId, round.signal.reason);
      if (uploads.signal.aborted) throw roundFailure(group.groupId, uploads.signal.reason);
      if (reduced !== undefined && !reduced.ok) throw roundFailure(group.groupId, reduced.error);
      const outcomes = exchanged.flatMap((outcome) =>
        outcome.status === "fulfilled" ? [outcome.value] : [],
      );
      return summarize(plan, result, outcomes, reduced?.ok === true ? reduced.value : undefined);
    } finally {
      clearTimeout(timer);
      options.signal?.removeEventListener("abort", onAbort);
      this.#unregister(group.groupId);
    }
  }

  async #handle(incoming: RpcIncoming<AllReduceRequest, AllReduceResponse>): Promise<void> {
    const { groupId } = incoming.head;
    const round = this.#rounds.get(groupId) ?? (await this.#waitForRound(groupId, incoming.signal));
    if (round.reducer === undefined) {
      checkRequest(round.plan, round.chunkElements, incoming.head, incoming.from.peerId);
      throw new SwarmError(SwarmErrorCode.MALFORMED_MESSAGE, "this member reduces no part");
    }
    await round.reducer.accept(incoming);
  }

  async #waitForRound(groupId: string, signal: AbortSignal): Promise<ActiveRound> {
    const unknown = (why: string) =>
      new SwarmError(SwarmErrorCode.ALLREDUCE_FAILED, `round ${groupId} ${why}`);
    if (this.#finished.has(groupId)) throw unknown("is over on this peer");
    if (this.#waitingCount >= MAX_WAITING_STREAMS) {
      throw unknown("cannot wait: too many streams wait for their round");
    }
    const waiter = Promise.withResolvers<ActiveRound>();
    const waiters = this.#waiting.get(groupId) ?? new Set();
    this.#waiting.set(groupId, waiters);
    waiters.add(waiter);
    this.#waitingCount++;
    const timer = stallAwareTimeout(() => {
      waiter.reject(unknown(`did not start here within ${this.#sessionWaitMs} ms`));
    }, this.#sessionWaitMs);
    const onAbort = () => {
      waiter.reject(unknown("stream closed while waiting"));
    };
    signal.addEventListener("abort", onAbort, { once: true });
    try {
      return await waiter.promise;
    } finally {
      timer.clear();
      signal.removeEventListener("abort", onAbort);
      if (waiters.delete(waiter)) this.#waitingCount--;
      if (waiters.size === 0 && this.#waiting.get(groupId) === waiters) this.#waiting.delete(groupId);
    }
  }

  #register(groupId: string, round: ActiveRound): void {
    this.#rounds.set(groupId, round);
    for (const waiter of this.#waiting.get(groupId) ?? []) waiter.resolve(round);
  }

  #unregister(groupId: string): void {
    this.#rounds.delete(groupId);
    this.#finished.add(groupId);
    if (this.#finished.size > FINISHED_ROUNDS_KEPT) {
      const oldest = this.#finished.values().next();
      if (oldest.done !== true) this.#finished.delete(oldest.value);
    }
  }
}

function checkLocalInput(plan: RoundPlan, options: AllReduceRunOptions): void {
  const invalid = (message: string) =>
    new SwarmError(SwarmErrorCode.ALLREDUCE_FAILED, `invalid all-reduce input: ${message}`);
  const { weight, vector } = options;
  if (!Number.isFinite(weight) || weight < 0) throw invalid(`weight ${weight}`);
  if (weight > 0 !== plan.contributors.has(plan.selfIndex)) {
    throw invalid(
      `weight ${weight} disagrees with the group's weight ${plan.group.members[plan.selfIndex]?.weight}`,
    );
  }
  if (!(options.timeoutMs > 0)) throw invalid(`timeout ${options.timeoutMs} ms`);
  if (!(options.chunkSizeBytes > 0)) throw invalid(`chunk size ${options.chunkSizeBytes} bytes`);
  if (
    options.chunksInFlight !== undefined &&
    !(Number.isInteger(options.chunksInFlight) && options.chunksInFlight >= 1)
  ) {
    throw invalid(`${options.chunksInFlight} chunks in flight`);
  }
  if (
    options.maxChunksInFlight !== undefined &&
    !(Number.isInteger(options.maxChunksInFlight) && options.maxChunksInFlight >= 1)
  ) {
    throw invalid(`at most ${options.maxChunksInFlight} chunks in flight`);
  }
  const { residual } = options;
  if (residual !== undefined) {
    if (residual.length !== vector.length) {
      throw invalid(`the residual has ${residual.length} elements, the vector ${vector.length}`);
    }
    if (
      residual.buffer === vector.buffer &&
      residual.byteOffset < vector.byteOffset + vector.byteLength &&
      vector.byteOffset < residual.byteOffset + residual.byteLength
    ) {
      throw invalid("the residual overlaps the vector");
    }
  }
  if (plan.contributors.has(plan.selfIndex)) {
    for (let i = 0; i < vector.length; i++) {
      if (!Number.isFinite(vector[i])) throw invalid(`element ${i} of the vector is ${vector[i]}`);
    }
  }
}

type Settled<T> = { ok: true; value: T } | { ok: false; error: unknown };

async function settle<T>(promise: Promise<T>): Promise<Settled<T>> {
  try {
    return { ok: true, value: await promise };
  } catch (error) {
    return { ok: false, error };
  }
}

/**
 * The caller's abort stays ABORTED and a refusal ALLREDUCE_REFUSED; everything else (timeout, a
 * lost part) becomes ALLREDUCE_FAILED.
 */
function roundFailure(groupId: string, cause: unknown): SwarmError {
  if (
    isSwarmError(cause, SwarmErrorCode.ABORTED) ||
    isSwarmError(cause, SwarmErrorCode.ALLREDUCE_FAILED) ||
    isSwarmError(cause, SwarmErrorCode.ALLREDUCE_REFUSED)
  ) {
    return cause;
  }
  const message = cause instanceof Error ? cause.message : String(cause);
  return new SwarmError(SwarmErrorCode.ALLREDUCE_FAILED, `round ${groupId} failed: ${message}`, { cause });
}

function summarize(
  plan: RoundPlan,
  vector: Float32Array,
  exchanges: readonly PartExchangeOutcome[],
  reduced: ReducerOutcome | undefined,
): AllReduceResult {
  const sources = reduced === undefined ? exchanges : [...exchanges, reduced];
  const chunkWeights = sources.flatMap((source) => source.chunkWeights);
  const excluded = new Set<number>();
  for (const bitmap of sources.flatMap((source) => source.chunkContributors)) {
    for (const index of plan.contributors) {
      if (((bitmap[index >> 3] ?? 0) & (1 << (index & 7))) === 0) excluded.add(index);
    }
  }
  const reasons = new Map((reduced?.excluded ?? []).map((exclusion) => [exclusion.index, exclusion.reason]));
  const order = [...excluded].sort((a, b) => a - b);
  const peerOf = (index: number) => plan.group.members[index]?.peerId ?? "";
  const sum = (pick: (source: PartExchangeOutcome | ReducerOutcome) => number) =>
    sources.reduce((total, source) => total + pick(source), 0);
  return {
    vector,
    totalWeight: chunkWeights.length === 0 ? 0 : chunkWeights.reduce((min, weight) => Math.min(min, weight)),
    excluded: order.map(peerOf),
    exclusions: order.map((index) => ({ peer: peerOf(index), reason: reasons.get(index) ?? "elsewhere" })),
    bytesSent: sum((source) => source.bytesSent),
    bytesReceived: sum((source) => source.bytesReceived),
    bytesAggregated: reduced?.bytesAggregated ?? 0,
    largestWindow: exchanges.reduce((largest, exchange) => Math.max(largest, exchange.largestWindow), 0),
  };
}
