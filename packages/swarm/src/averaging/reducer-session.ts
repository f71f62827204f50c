import type { Logger } from "pino";
import {
  compressWithFeedback,
  decompress,
  encodeTopkMean,
  isTopkEncoding,
  resultCompressorFor,
  topkMeanBytes,
  type Compressor,
  type TopkMeanEntry,
} from "../compression/index.ts";
import { SwarmError, SwarmErrorCode, isSwarmError } from "../errors.ts";
import type { RpcFrameStream, RpcIncoming } from "../rpc/rpc.ts";
import {
  type AllReduceRequest,
  type AllReduceResponse,
  assertFinite,
  bitmapBytes,
  checkRequest,
  decodeChunkFrame,
  encodeRefusalFrame,
  encodeResultFrame,
  type ExclusionReason,
  isRefusalReason,
  type RefusalReason,
} from "./allreduce-messages.ts";
import { lowerMedian } from "../progress/record-plausibility.ts";
import type { Aggregator } from "./aggregation/aggregator.ts";
import { weightedMean } from "./aggregation/weighted-mean.ts";
import { chunkRanges, type ElementRange, type RoundPlan } from "./partition.ts";
import { stallAwareTimeout } from "../time/stall-aware-timeout.ts";
import type { PeerActivity } from "./peer-activity.ts";
import { Wakeup } from "./wakeup.ts";

export type { ExclusionReason } from "./allreduce-messages.ts";

/**
 * One remote sender's values for one chunk of the reducer's part, as decoded from its stream and
 * about to be aggregated (see `ReducerSessionOptions.onContribution`).
 */
export interface ChunkContribution {
  /** The sender's index in the group, and its PeerId. */
  readonly index: number;
  readonly peerId: string;
  /** The sender's weight (its samples). */
  readonly weight: number;
  /** The reducer's whole part, absolute element offsets: a sender's chunks of it come in order. */
  readonly part: ElementRange;
  /** Where `values` lie in the whole vector: absolute element offsets [start, end). */
  readonly range: ElementRange;
  /** Owned by the session and not written to after this call; the observer must not modify them. */
  readonly values: Float32Array;
}

/** Chunks a sender's reader may decode ahead of the aggregation (bounds memory, pushes back on the sender). */
const READ_AHEAD_CHUNKS = 2;

export interface ReducerSessionOptions {
  plan: RoundPlan;
  chunkElements: number;
  /**
   * The round's codec. Each averaged chunk is compressed once for every receiver in its result
   * codec (`resultCompressorFor`: "sparse" for "topk", the same codec otherwise). A topk chunk
   * aggregated by the weighted mean goes instead as the contributions themselves
   * (`encodeTopkMean`) when that is smaller, which it is at low densities.
   */
  compressor: Compressor;
  /** The local member's own values for this part, or undefined when it contributes nothing. */
  localValues: Float32Array | undefined;
  /**
   * Error feedback on the own part: when given (as long as `localValues`), each chunk of the own
   * values goes through `compressor` like every sender's before it is summed, and this receives
   * what that left out (see `compressWithFeedback`). Absent: the own values are summed exactly.
   */
  localResidual?: Float32Array;
  localWeight: number;
  /** How the contributions to each chunk are combined; default the weighted mean. */
  aggregator?: Aggregator;
  /**
   * The most weight each remote sender can have earned (from its progress records, see
   * `ProgressTracker.awaitEarnedWeight`), resolved once it reaches the `declared` weight or a short
   * wait for the sender's records ran out: one declaring more is refused ("unearned") and its
   * samples stay out of this part. Absent: declared weights are taken as they are.
   */
  earnedWeight?: (peerId: string, declared: number, signal: AbortSignal) => Promise<number>;
  /**
   * Caps every contributor's weight in the aggregate at this many times the lower median of the
   * group's positive weights, so that no declared weight steers the mean or CenteredClip (the
   * result's total weight still counts the samples). Absent: weights are used as declared.
   */
  maxWeightRatio?: number;
  /**
   * Told each remote sender's values for each chunk just before they are aggregated, in member
   * order (a validator samples what each peer contributes). Only senders still in the round are
   * reported, so a sender excluded at a later chunk has reported only a prefix of its part; the
   * reducer's own values are not. Absent: nothing is copied or called.
   */
  onContribution?: (contribution: ChunkContribution) => void;
  /** Receives each averaged chunk as decoded from the bytes sent to everyone (offsets within the part). */
  onResult: (chunk: ElementRange, values: Float32Array) => void;
  /**
   * A sender that has not delivered the chunk being waited for within this time is excluded; with
   * `activity`, unless something else came from it in the last `senderTimeoutMs` (its link is slow,
   * not gone), and then once it has been silent that long.
   */
  senderTimeoutMs: number;
  /** When each member of the round was last heard from; this session records the senders' chunks. */
  activity?: PeerActivity;
  /** The round's signal: aborting it fails the session. */
  signal: AbortSignal;
  logger: Logger;
}

/** What the reducer did, for the round's result and stats. */
export interface ReducerOutcome {
  /** Per chunk: Σ w_i over the senders averaged into it, and their member-index bitmap. */
  chunkWeights: number[];
  chunkContributors: Uint8Array[];
  bytesSent: number;
  bytesReceived: number;
  /** Raw float32 bytes of remote contributions this member summed. */
  bytesAggregated: number;
  /** Senders this reducer left out of the round (from the chunk they failed on), and why. */
  excluded: { index: number; peerId: string; reason: ExclusionReason }[];
}

type SenderState = "absent" | "live" | "excluded" | "done";

interface RemoteSender {
  readonly index: number;
  readonly peerId: string;
  readonly contributes: boolean;
  state: SenderState;
  /**
   * The records that earn its declared weight are still awaited: its stream is read meanwhile, but
   * no chunk is reduced until they come (or it is refused), so the wait overlaps the transfer.
   */
  checking: boolean;
  weight: number;
  stream: RpcFrameStream | undefined;
  /** Why it was excluded for what it did on its own stream: what it is told (see `#refuse`). */
  refusal: RefusalReason | undefined;
  /** Decoded chunks waiting to be averaged. */
  readonly chunks: Map<number, ReceivedChunk>;
}

/** A sender's chunk as decoded, and the codec's bytes it came in. */
interface ReceivedChunk {
  readonly values: Float32Array;
  readonly payload: Uint8Array;
}

/**
 * The reducer side of one round: member j averages part j (DeDLOC §3.2). Per chunk k it waits
 * until every live contributor delivered chunk k, computes Σ w_i x_i / Σ w_i over those that did
 * (in float64, in member order) or whatever else its `aggregator` computes (CenteredClip),
 * compresses the result once and queues the same bytes for every live
 * receiver, while readers already decode chunk k+1: upload, reduction and download overlap.
 * A sender that breaks, stalls or sends anything malformed (a non-finite value included) is
 * excluded from the remaining chunks (its weight leaves the denominator) and the outcome lists it
 * with the reason. One that stalled or sent something wrong is told so on its stream (a refusal
 * frame, see `#refuse`), so that it fails its own round as refused rather than taking this reducer
 * for gone; a broken stream is aborted. The session itself only fails when the round is
 * aborted, no sender is left for a chunk, or an aggregate is not finite (it is never sent). Every participant must have opened
 * its stream before chunk 0 is reduced (waiting at most `senderTimeoutMs`); weight-0 participants
 * send no chunks and are only served results.
 */
export class ReducerSession {
  readonly #options: ReducerSessionOptions;
  readonly #chunks: ElementRange[];
  /** This member's part of the whole vector. */
  readonly #part: ElementRange;
  readonly #remotes = new Map<number, RemoteSender>();
  readonly #frames: Uint8Array[] = [];
  readonly #connections: Promise<void>[] = [];
  readonly #wake = new Wakeup();
  /** The most weight one contributor has in the aggregate (see `maxWeightRatio`). */
  readonly #weightCap: number;
  #failure: SwarmError | undefined;
  readonly #outcome: ReducerOutcome = {
    chunkWeights: [],
    chunkContributors: [],
    bytesSent: 0,
    bytesReceived: 0,
    bytesAggregated: 0,
    excluded: [],
  };

  constructor(options: ReducerSessionOptions) {
    this.#options = options;
    const { plan } = options;
    const part = plan.parts[plan.selfIndex];
    if (part === undefined || part.end <= part.start) {
      throw new SwarmError(SwarmErrorCode.ALLREDUCE_FAILED, "a reducer session needs a non-empty part");
    }
    this.#chunks = chunkRanges(0, part.end - part.start, options.chunkElements);
    this.#part = { start: part.start, end: part.end };
    const weights = plan.group.members.map((member) => member.weight).filter((weight) => weight > 0);
    this.#weightCap =
      options.maxWeightRatio === undefined ? Infinity : options.maxWeightRatio * lowerMedian(weights);
    for (const index of plan.participants) {
      if (index === plan.selfIndex) continue;
      const peerId = plan.group.members[index]?.peerId ?? "";
      const contributes = plan.contributors.has(index);
      this.#remotes.set(index, {
        index,
        peerId,
        contributes,
        state: "absent",
        checking: false,
        weight: 0,
        stream: undefined,
        refusal: undefined,
        chunks: new Map(),
      });
    }
  }

  /**
   * Takes one sender's stream. Throws (before responding, so the caller gets the error) when the
   * head does not fit the plan or the sender already has a stream or was excluded; otherwise serves
   * the stream and resolves when this sender is done.
   */
  accept(incoming: RpcIncoming<AllReduceRequest, AllReduceResponse>): Promise<void> {
    const { head, from } = incoming;
    checkRequest(this.#options.plan, this.#options.chunkElements, head, from.peerId);
    this.#options.activity?.heard(from.peerId);
    if (this.#failure !== undefined) {
      throw new SwarmError(
        SwarmErrorCode.ALLREDUCE_FAILED,
        `round ${head.groupId} failed here: ${this.#failure.message}`,
      );
    }
    const sender = this.#remotes.get(head.senderIndex);
    if (sender === undefined) {
      throw new SwarmError(SwarmErrorCode.MALFORMED_MESSAGE, "a member cannot send to itself");
    }
    if (sender.state === "excluded") return this.#turnAway(sender, incoming);
    if (sender.state !== "absent") {
      throw malformed(`${from.peerId} already has a stream in round ${head.groupId}`);
    }
    const { earnedWeight } = this.#options;
    if (sender.contributes && earnedWeight !== undefined) {
      sender.checking = true;
      void earnedWeight(from.peerId, head.weight, this.#options.signal).then(
        (earned) => {
          sender.checking = false;
          if (head.weight > earned) {
            // A weight its progress records did not announce: it is told, and its samples stay out.
            const reason = `declared weight ${head.weight} is more than its progress records earned (${Math.floor(earned)})`;
            this.#options.logger.warn(
              { groupId: head.groupId, peer: from.peerId, weight: head.weight, earned },
              `refused ${from.peerId} in the all-reduce: ${reason}`,
            );
            this.#exclude(sender, new SwarmError(SwarmErrorCode.UNAUTHORIZED_PEER, reason), "unearned");
          }
          this.#wake.notify();
        },
        (error: unknown) => {
          // The check could not be made: the sender is left out of this round, as one not earned.
          sender.checking = false;
          this.#exclude(sender, error, "unearned");
          this.#wake.notify();
        },
      );
    }
    return this.#admit(sender, incoming);
  }

  /** Serves an admitted sender's stream; resolves when it is done. */
  #admit(sender: RemoteSender, incoming: RpcIncoming<AllReduceRequest, AllReduceResponse>): Promise<void> {
    sender.state = "live";
    sender.weight = incoming.head.weight;
    const serving = this.#serve(sender, incoming);
    this.#connections.push(serving);
    return serving;
  }

  /**
   * Answers an excluded sender: one refused for what it did (or came too late) learns why on its
   * stream like any refused sender; otherwise the caller gets the error.
   */
  #turnAway(sender: RemoteSender, incoming: RpcIncoming<AllReduceRequest, AllReduceResponse>): Promise<void> {
    const refusal = sender.refusal;
    if (refusal !== undefined && this.#failure === undefined) {
      return incoming
        .respond({ chunkCount: this.#chunks.length })
        .then((stream) => this.#refuse(stream, refusal, excludedError(sender.peerId, refusal)));
    }
    return Promise.reject(
      this.#failure ??
        new SwarmError(
          SwarmErrorCode.ALLREDUCE_FAILED,
          `${sender.peerId} was excluded from round ${incoming.head.groupId}`,
          { peer: sender.peerId },
        ),
    );
  }

  /**
   * Excludes a member from the remaining chunks on local knowledge (e.g. this member's own exchange
   * with it failed), so the session does not wait for a peer that is known to be gone. Its stream
   * is aborted: it did nothing wrong on it, so it is not told it was refused.
   */
  excludeMember(index: number, reason: unknown): void {
    const sender = this.#remotes.get(index);
    if (sender !== undefined) this.#exclude(sender, reason, undefined, false);
  }

  /** Runs the aggregation; resolves once every receiver is served or excluded. */
  async run(): Promise<ReducerOutcome> {
    const { signal } = this.#options;
    const onAbort = () => {
      this.#fail(toSwarmError(signal.reason, "the round was aborted"));
    };
    if (signal.aborted) onAbort();
    else signal.addEventListener("abort", onAbort, { once: true });
    try {
      for (let k = 0; k < this.#chunks.length; k++) {
        await this.#awaitChunk(k);
        this.#reduce(k);
      }
    } catch (error) {
      this.#fail(toSwarmError(error, "the reduction failed"));
    } finally {
      signal.removeEventListener("abort", onAbort);
    }
    await Promise.allSettled(this.#connections);
    if (this.#failure !== undefined) throw this.#failure;
    return this.#outcome;
  }

  async #awaitChunk(k: number): Promise<void> {
    const { senderTimeoutMs: ms, activity } = this.#options;
    const expire = (): void => {
      let recheckMs = Infinity;
      for (const sender of this.#remotes.values()) {
        if (this.#hasDelivered(sender, k)) continue;
        // A sender still heard from is slow, not gone; one whose records are awaited is not helped.
        const silent = sender.checking ? Infinity : (activity?.silentFor(sender.peerId) ?? Infinity);
        if (silent < ms) {
          recheckMs = Math.min(recheckMs, ms - silent);
          continue;
        }
        const what =
          sender.state === "absent"
            ? "did not connect"
            : sender.checking
              ? "did not show records that earn its weight"
              : `did not deliver chunk ${k}`;
        this.#exclude(sender, new SwarmError(SwarmErrorCode.TIMEOUT, `${what} within ${ms} ms`));
      }
      if (recheckMs < Infinity) timer = stallAwareTimeout(expire, recheckMs);
    };
    let timer = stallAwareTimeout(expire, ms);
    try {
      while (![...this.#remotes.values()].every((sender) => this.#hasDelivered(sender, k))) {
        if (this.#failure !== undefined) throw this.#failure;
        await this.#wake.wait();
      }
    } finally {
      timer.clear();
    }
  }

  #hasDelivered(sender: RemoteSender, k: number): boolean {
    if (sender.state === "excluded") return true;
    if (sender.state === "absent" || sender.checking) return false;
    return !sender.contributes || sender.chunks.has(k);
  }

  #reduce(k: number): void {
    const { plan, localValues, localResidual, localWeight, compressor } = this.#options;
    const chunk = this.#chunks[k] ?? { start: 0, end: 0 };
    const length = chunk.end - chunk.start;
    const contributors = new Uint8Array(bitmapBytes(plan.group.members.length));
    const points: Float32Array[] = [];
    const weights: number[] = [];
    // Each point's codec bytes, while every point has them (a topk mean can be sent as these).
    let encoded: TopkMeanEntry[] | undefined = compressor.name === "topk" ? [] : undefined;
    // The samples that went in, and the weights the aggregate used (capped, see `maxWeightRatio`).
    let totalWeight = 0;
    const add = (index: number, values: Float32Array, weight: number, payload: Uint8Array | undefined) => {
      const capped = Math.min(weight, this.#weightCap);
      points.push(values);
      weights.push(capped);
      // A sender may send its chunk in any codec; only topk bytes can stand for it in a topk mean.
      if (payload === undefined || !(weight > 0) || !isTopkEncoding(payload)) encoded = undefined;
      else encoded?.push({ bytes: payload, weight: capped });
      totalWeight += weight;
      contributors[index >> 3] = (contributors[index >> 3] ?? 0) | (1 << (index & 7));
    };
    for (let index = 0; index < plan.group.members.length; index++) {
      if (index === plan.selfIndex) {
        if (localValues === undefined) continue;
        const own = localValues.subarray(chunk.start, chunk.end);
        if (localResidual === undefined) {
          add(index, own, localWeight, undefined);
        } else {
          const sent = compressWithFeedback(compressor, own, localResidual.subarray(chunk.start, chunk.end));
          add(index, sent.sent, localWeight, sent.bytes);
        }
        continue;
      }
      const sender = this.#remotes.get(index);
      const received = sender?.chunks.get(k);
      if (sender === undefined || received === undefined) continue;
      const { values, payload } = received;
      sender.chunks.delete(k);
      if (sender.state === "excluded") continue;
      this.#options.onContribution?.({
        index,
        peerId: sender.peerId,
        weight: sender.weight,
        part: this.#part,
        range: { start: this.#part.start + chunk.start, end: this.#part.start + chunk.end },
        values,
      });
      add(index, values, sender.weight, payload);
      this.#outcome.bytesAggregated += length * Float32Array.BYTES_PER_ELEMENT;
    }
    if (!(totalWeight > 0)) {
      throw new SwarmError(
        SwarmErrorCode.ALLREDUCE_FAILED,
        `no sender delivered chunk ${k} of part ${plan.selfIndex}`,
      );
    }
    const aggregator = this.#options.aggregator ?? weightedMean;
    const mean = aggregator.aggregate(points, weights);
    // Finite inputs can still overflow float32; such a result is never sent.
    if (!mean.every((value) => Number.isFinite(value))) {
      throw new SwarmError(
        SwarmErrorCode.ALLREDUCE_FAILED,
        `the aggregate of chunk ${k} of part ${plan.selfIndex} is not finite`,
      );
    }
    const sparse = resultCompressorFor(compressor).compress(mean);
    const payload =
      aggregator === weightedMean && encoded !== undefined && topkMeanBytes(encoded) < sparse.length
        ? encodeTopkMean(encoded, length)
        : sparse;
    // Every receiver decodes these bytes; so does this reducer, so all hold the same bits.
    this.#options.onResult(chunk, decompress(payload, length));
    this.#frames.push(encodeResultFrame(k, { totalWeight, contributors, payload }));
    this.#outcome.chunkWeights.push(totalWeight);
    this.#outcome.chunkContributors.push(contributors);
    this.#wake.notify();
  }

  async #serve(
    sender: RemoteSender,
    incoming: RpcIncoming<AllReduceRequest, AllReduceResponse>,
  ): Promise<void> {
    let stream: RpcFrameStream;
    try {
      stream = await incoming.respond({ chunkCount: this.#chunks.length });
    } catch (error) {
      this.#exclude(sender, error);
      return;
    }
    sender.stream = stream;
    if (this.#failure === undefined && sender.state === "excluded" && sender.refusal !== undefined) {
      await this.#refuse(stream, sender.refusal, excludedError(sender.peerId, sender.refusal));
      return;
    }
    if (sender.state === "excluded" || this.#failure !== undefined) {
      stream.abort(
        this.#failure ?? new SwarmError(SwarmErrorCode.ALLREDUCE_FAILED, "excluded from the round"),
      );
      return;
    }
    this.#wake.notify();
    const reading = this.#readChunks(sender, stream).catch((error: unknown) => {
      this.#exclude(sender, error);
    });
    const writing = this.#writeResults(sender, stream).catch((error: unknown) => {
      this.#exclude(sender, error);
    });
    await Promise.all([reading, writing]);
    if (sender.state !== "live") return;
    sender.state = "done";
    // The sender closes its end after its last chunk; check that without holding the round on it.
    void this.#expectEnd(sender, stream);
  }

  async #readChunks(sender: RemoteSender, stream: RpcFrameStream): Promise<void> {
    const chunkCount = sender.contributes ? this.#chunks.length : 0;
    for (let k = 0; k < chunkCount; k++) {
      while (k >= this.#frames.length + READ_AHEAD_CHUNKS) {
        if (sender.state === "excluded" || this.#failure !== undefined) return;
        await this.#wake.wait();
      }
      const frame = await stream.read();
      if (frame === null) throw malformed(`closed its stream after ${k} of ${chunkCount} chunks`);
      this.#options.activity?.heard(sender.peerId);
      this.#outcome.bytesReceived += frame.length;
      const chunk = this.#chunks[k] ?? { start: 0, end: 0 };
      const length = chunk.end - chunk.start;
      const payload = decodeChunkFrame(frame, k, length);
      const values = decompress(payload, length);
      try {
        assertFinite(values, `chunk ${k}`);
      } catch (error) {
        this.#exclude(sender, error, "non-finite");
        return;
      }
      if (sender.state !== "live") return;
      sender.chunks.set(k, { values, payload });
      this.#wake.notify();
    }
  }

  async #expectEnd(sender: RemoteSender, stream: RpcFrameStream): Promise<void> {
    try {
      if ((await stream.read()) === null) return;
      const error = malformed(`${sender.peerId} sent a frame after its last chunk`);
      this.#options.logger.debug({ peer: sender.peerId }, error.message);
      stream.abort(error);
    } catch {
      // The stream went away after this sender was fully served: nothing left to do.
    }
  }

  async #writeResults(sender: RemoteSender, stream: RpcFrameStream): Promise<void> {
    for (let k = 0; k < this.#chunks.length; k++) {
      for (;;) {
        if (sender.state === "excluded") return;
        if (this.#failure !== undefined) throw this.#failure;
        if (k < this.#frames.length) break;
        await this.#wake.wait();
      }
      const frame = this.#frames[k] ?? new Uint8Array(0);
      await stream.write(frame, { signal: this.#options.signal });
      this.#outcome.bytesSent += frame.length;
    }
    await stream.closeWrite();
  }

  /**
   * Leaves `sender` out of the remaining chunks. With `tell` (the reason is what this reducer saw
   * on the sender's own stream), a sender refused for a reason it can be told of gets a refusal
   * frame instead of a reset.
   */
  #exclude(sender: RemoteSender, error: unknown, why?: ExclusionReason, tell = true): void {
    if (sender.state === "excluded" || sender.state === "done") return;
    sender.state = "excluded";
    sender.chunks.clear();
    const reason = toSwarmError(error, "the stream failed");
    const exclusion = why ?? exclusionReason(reason);
    if (tell && isRefusalReason(exclusion)) {
      sender.refusal = exclusion;
      if (sender.stream !== undefined) void this.#refuse(sender.stream, exclusion, reason);
    } else {
      sender.stream?.abort(reason);
    }
    // A weight-0 participant only takes results: losing it leaves every chunk's aggregate as is.
    if (sender.contributes) {
      this.#outcome.excluded.push({ index: sender.index, peerId: sender.peerId, reason: exclusion });
    }
    this.#options.logger.debug(
      {
        groupId: this.#options.plan.group.groupId,
        peer: sender.peerId,
        reason: exclusion,
        code: reason.code,
        err: reason.message,
      },
      "excluded a sender from the all-reduce",
    );
    this.#wake.notify();
  }

  /**
   * Tells an excluded sender why (a refusal frame, see allreduce-messages.ts) and closes this end;
   * this reducer reads nothing more from it. The sender's code aborts the stream once it has read
   * the frame; one that does not is cut off after a sender deadline, or when the round ends badly.
   * Resolves once the frame is out (or could not be sent); never rejects.
   */
  async #refuse(stream: RpcFrameStream, reason: RefusalReason, error: SwarmError): Promise<void> {
    const grace = AbortSignal.any([this.#options.signal, AbortSignal.timeout(this.#options.senderTimeoutMs)]);
    const cut = () => {
      stream.abort(error);
    };
    if (grace.aborted) {
      cut();
      return;
    }
    grace.addEventListener("abort", cut, { once: true });
    try {
      await stream.write(encodeRefusalFrame(reason), { signal: grace });
      await stream.closeWrite();
    } catch {
      grace.removeEventListener("abort", cut);
      cut();
    }
  }

  #fail(error: SwarmError): void {
    if (this.#failure !== undefined) return;
    this.#failure = error;
    for (const sender of this.#remotes.values()) sender.stream?.abort(error);
    this.#wake.notify();
  }
}

function exclusionReason(error: SwarmError): ExclusionReason {
  switch (error.code) {
    case SwarmErrorCode.TIMEOUT:
      return "timeout";
    case SwarmErrorCode.MALFORMED_MESSAGE:
    case SwarmErrorCode.OVERSIZED_MESSAGE:
    case SwarmErrorCode.LENGTH_MISMATCH:
      return "malformed";
    default:
      return "failed";
  }
}

function excludedError(peerId: string, reason: RefusalReason): SwarmError {
  return new SwarmError(SwarmErrorCode.ALLREDUCE_FAILED, `${peerId} was excluded from the round: ${reason}`, {
    peer: peerId,
  });
}

function malformed(message: string): SwarmError {
  return new SwarmError(SwarmErrorCode.MALFORMED_MESSAGE, message);
}

function toSwarmError(error: unknown, fallback: string): SwarmError {
  if (isSwarmError(error)) return error;
  return new SwarmError(SwarmErrorCode.ALLREDUCE_FAILED, `${fallback}: ${String(error)}`, { cause: error });
}
