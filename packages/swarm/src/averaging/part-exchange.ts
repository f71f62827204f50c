import { compressWithFeedback, decompress, type Compressor } from "../compression/index.ts";
import { SwarmError, SwarmErrorCode, isSwarmError } from "../errors.ts";
import type { Rpc, RpcFrameStream } from "../rpc/rpc.ts";
import {
  allReduceMethod,
  assertFinite,
  decodeResultFrame,
  encodeChunkFrame,
  refusalOf,
} from "./allreduce-messages.ts";
import { chunkRanges, type ElementRange, type RoundPlan } from "./partition.ts";
import { silenceTimeout, type PeerActivity } from "./peer-activity.ts";
import { Wakeup } from "./wakeup.ts";

export interface PartExchangeOptions {
  rpc: Rpc;
  plan: RoundPlan;
  /** The remote reducer's index, which is also the part's index. */
  partIndex: number;
  /** The local member's weight; 0 means it only takes the result and sends no chunks. */
  weight: number;
  /** The local values of this part (never modified). */
  values: Float32Array;
  /**
   * Error feedback: receives, as each chunk is sent, `values` minus what the reducer decodes of it
   * (see `compressWithFeedback`). As long as `values`; untouched when nothing is sent (weight 0).
   */
  residual?: Float32Array;
  /** Where the averaged part goes. */
  output: Float32Array;
  chunkElements: number;
  /** Chunks written ahead of the results read back at first and at least (end-to-end flow control, ≥ 1). */
  chunksInFlight: number;
  /**
   * The most chunks the window may grow to as it follows the stream's bandwidth-delay product;
   * default `chunksInFlight` (a fixed window).
   */
  maxChunksInFlight?: number;
  /** This member's upload rate divided among its streams, bytes per second; 0 or absent: a fixed window. */
  streamBytesPerSecond?: number;
  /** Encoded bytes per chunk, to turn the bandwidth-delay product into chunks. */
  chunkBytes?: number;
  /** Recent round trips per reducer, kept across rounds; the window follows their least. */
  roundTrips?: RoundTripFloor;
  compressor: Compressor;
  signal: AbortSignal;
  timeoutMs: number;
  /**
   * A reducer that sends no result for this long while results are due (a frozen process, a dead
   * link) fails the part at once instead of at the round's deadline; default: no such limit.
   * With `activity`, the time counts only while nothing at all comes from the reducer.
   */
  resultTimeoutMs?: number;
  /** When each member of the round was last heard from; this exchange records its reducer's results. */
  activity?: PeerActivity;
}

/** What one exchange moved and what the reducer reported per chunk. */
export interface PartExchangeOutcome {
  bytesSent: number;
  bytesReceived: number;
  /** The window the stream used (chunks written ahead of the results read back). */
  largestWindow: number;
  chunkWeights: number[];
  chunkContributors: Uint8Array[];
}

/**
 * The sender side of one part: opens ONE stream to the part's reducer, uploads the part in
 * chunks (each compressed on its own, every write awaited for backpressure) while reading the
 * averaged chunks back on the same stream, so results flow while later chunks are still going up.
 * Chunk k is written only once the result of chunk k − chunksInFlight is back. Without that
 * window the chunks fill the connection's buffers (yamux windows, the kernel's send buffer) far
 * ahead of the results, which then queue behind them: links sit idle while the reducers wait for
 * the last chunks, and the round ends with a burst of results (measured: 1.4× the bandwidth bound
 * without the window, 1.1× with it; see bench/allreduce-bandwidth.ts).
 * The window follows the network (see `WindowControl`): what the stream sends in a round trip plus
 * 200 ms at its rate, from `chunksInFlight` up to `maxChunksInFlight`.
 * Any failure of the reducer (unreachable, broken stream, timeout, malformed result) rejects with
 * ALLREDUCE_FAILED: this member cannot complete the round without that part. A reducer that
 * excluded this member for what it sent (its refusal frame) rejects with ALLREDUCE_REFUSED, the
 * reason in `remoteCode`: the reducer is alive and goes on without this member.
 */
export async function exchangePart(options: PartExchangeOptions): Promise<PartExchangeOutcome> {
  const { rpc, plan, partIndex, signal } = options;
  const reducer = plan.group.members[partIndex]?.peerId ?? "";
  const chunks = chunkRanges(0, options.values.length, options.chunkElements);
  const outcome: PartExchangeOutcome = {
    bytesSent: 0,
    bytesReceived: 0,
    largestWindow: 0,
    chunkWeights: [],
    chunkContributors: [],
  };
  const failed = (error: unknown) =>
    isSwarmError(error, SwarmErrorCode.ALLREDUCE_REFUSED)
      ? error
      : new SwarmError(
          SwarmErrorCode.ALLREDUCE_FAILED,
          `part ${partIndex} from ${reducer} failed: ${error instanceof Error ? error.message : String(error)}`,
          { cause: error, peer: reducer },
        );
  let stream: RpcFrameStream;
  const control = new WindowControl({
    least: options.chunksInFlight,
    most: options.maxChunksInFlight ?? options.chunksInFlight,
    streamBytesPerSecond: options.streamBytesPerSecond ?? 0,
    chunkBytes: options.chunkBytes ?? 0,
  });
  try {
    const opened = performance.now();
    const call = await rpc.call(
      reducer,
      allReduceMethod,
      {
        groupId: plan.group.groupId,
        senderIndex: plan.selfIndex,
        partIndex,
        weight: options.weight,
        partLength: options.values.length,
        chunkElements: options.chunkElements,
      },
      // The answer to the opening request is the first result due: a reducer frozen before it
      // answers fails the part by the same deadline as one that stops sending results.
      { signal, timeoutMs: Math.min(options.timeoutMs, options.resultTimeoutMs ?? Infinity) },
    );
    stream = call.stream;
    const opening = performance.now() - opened;
    const connection = rpc.roundTripMs?.(reducer);
    control.roundTrip(
      options.roundTrips?.observe(reducer, opening, connection) ?? Math.min(opening, connection ?? Infinity),
    );
    if (call.head.chunkCount !== chunks.length) {
      throw new SwarmError(
        SwarmErrorCode.MALFORMED_MESSAGE,
        `reducer announced ${call.head.chunkCount} chunks, not ${chunks.length}`,
      );
    }
  } catch (error) {
    throw failed(error);
  }
  outcome.largestWindow = control.size;
  const abortOnError = (error: unknown) => {
    stream.abort(error instanceof Error ? error : new Error(String(error)));
    throw error;
  };
  const window: ResultWindow = {
    received: 0,
    stopped: false,
    wake: new Wakeup(),
    control,
  };
  const [sent, received] = await Promise.allSettled([
    (options.weight > 0 ? sendChunks(stream, chunks, options, outcome, window) : stream.closeWrite()).catch(
      abortOnError,
    ),
    receiveResults(stream, chunks, options, outcome, window)
      .catch(abortOnError)
      .finally(() => {
        window.stopped = true;
        window.wake.notify();
      }),
  ]);
  if (received.status === "rejected") throw failed(received.reason);
  if (sent.status === "rejected") throw failed(sent.reason);
  return outcome;
}

/** How far the results have come back, shared by the two halves of one exchange. */
interface ResultWindow {
  received: number;
  /** The reading half ended (done or failed): a writer still waiting gives up. */
  stopped: boolean;
  wake: Wakeup;
  control: WindowControl;
}

/**
 * The least recent round trip to each peer, as BBR keeps its min RTT: queueing and a busy CPU only
 * ever add delay, so the least of the recent samples is the path's own. Samples are the opening
 * request of each stream (which also carries a protocol negotiation, a signature check on each
 * side and whatever the link has queued at the round's start) and libp2p's connection pings.
 */
export class RoundTripFloor {
  readonly #samples = new Map<string, number[]>();
  readonly #keep: number;

  constructor(keep = 16) {
    this.#keep = keep;
  }

  /** Records the defined, finite samples and returns the least of the peer's recent ones. */
  observe(peer: string, ...samples: (number | undefined)[]): number | undefined {
    let recent = this.#samples.get(peer);
    for (const ms of samples) {
      if (ms === undefined || !(ms >= 0) || !Number.isFinite(ms)) continue;
      recent ??= [];
      recent.push(ms);
      if (recent.length > this.#keep) recent.shift();
    }
    if (recent === undefined) return undefined;
    // Refresh the peer's place, so the map forgets the peers not met for longest.
    this.#samples.delete(peer);
    this.#samples.set(peer, recent);
    if (this.#samples.size > 1024) this.#samples.delete(this.#samples.keys().next().value ?? peer);
    return Math.min(...recent);
  }
}

/**
 * How long a stream's window takes to drain at the stream's rate, beyond the round trip. The
 * results a member returns as a reducer share each connection with the chunks it sends, behind
 * them in the socket's buffer, so a window also delays the results that pace everyone else: on a
 * slow link shared by many streams a fixed 6 × 8 KiB was 3 s of queue. A window in time keeps
 * that short and still gives a stream that carries much of the upload (a fast reducer's part
 * under load balancing) room to absorb the other senders' jitter. Measured (medians of 3 rounds):
 * - `bench/allreduce-load-balancing.ts --setups D` (16 × 2 Mbit/s + 25 Mbit/s), uniform and
 *   balanced: a fixed 6 chunks 15.3 s and 7.8 s; 200 ms 12.3 s and 7.8 s; 600 ms 12.5 s and 7.7 s.
 * - `bench/allreduce-bandwidth.ts --peers 4,8` (10 Mbit/s), ÷ the bound: a fixed 6 chunks 1.10
 *   and 1.13; 200 ms 1.13 and 1.13; 600 ms 1.21 and 1.20. With `--rtt-ms 100`: 200 ms 1.21 and
 *   1.28; two round trips plus 200 ms (larger windows) 1.25 and 1.31.
 */
const QUEUE_MS = 200;

/**
 * How many chunks a stream keeps ahead of its results: what the stream sends in a round trip plus
 * QUEUE_MS, at least `least` and at most `most`. The rate is the stream's share of this member's
 * measured upload (`streamBytesPerSecond`, see LinkMeter: shared in proportion to the parts); the
 * round trip is the least recent one to the reducer (`RoundTripFloor`), taken before any chunk is
 * queued (a chunk's own round trip includes the queue the window itself builds, and sizing the
 * window from it fed back into ever larger windows; so did the opening request's round trip alone
 * on a loaded link). At 100 ms a fixed window of 6 × 8 KiB would cap a stream at 48 KiB per round
 * trip (3.9 Mbit/s).
 */
export class WindowControl {
  readonly #least: number;
  readonly #most: number;
  readonly #streamBytesPerMs: number;
  readonly #chunkBytes: number;
  #size: number;

  constructor(options: { least: number; most: number; streamBytesPerSecond: number; chunkBytes: number }) {
    this.#least = Math.max(1, Math.floor(options.least));
    this.#most = Math.max(this.#least, Math.floor(options.most));
    const rate = options.streamBytesPerSecond;
    this.#streamBytesPerMs = Number.isFinite(rate) && rate > 0 ? rate / 1000 : 0;
    this.#chunkBytes = Math.max(1, options.chunkBytes);
    this.#size = this.#least;
  }

  /** Chunks that may be written ahead of the results read back. */
  get size(): number {
    return this.#size;
  }

  /** Sizes the window for a measured round trip of `ms` milliseconds. */
  roundTrip(ms: number): void {
    if (!(ms >= 0) || this.#streamBytesPerMs === 0) return;
    const chunks = Math.ceil((this.#streamBytesPerMs * (ms + QUEUE_MS)) / this.#chunkBytes);
    this.#size = Math.min(this.#most, Math.max(this.#least, chunks));
  }
}

async function sendChunks(
  stream: RpcFrameStream,
  chunks: readonly ElementRange[],
  options: PartExchangeOptions,
  outcome: PartExchangeOutcome,
  window: ResultWindow,
): Promise<void> {
  for (const [k, chunk] of chunks.entries()) {
    while (k - window.received >= window.control.size) {
      if (window.stopped) {
        throw new SwarmError(SwarmErrorCode.PEER_UNREACHABLE, `results stopped before chunk ${k} was sent`);
      }
      await window.wake.wait();
    }
    const values = options.values.subarray(chunk.start, chunk.end);
    const payload =
      options.residual === undefined
        ? options.compressor.compress(values)
        : compressWithFeedback(options.compressor, values, options.residual.subarray(chunk.start, chunk.end))
            .bytes;
    const frame = encodeChunkFrame(k, payload);
    await stream.write(frame, { signal: options.signal });
    outcome.bytesSent += frame.length;
  }
  await stream.closeWrite();
}

async function receiveResults(
  stream: RpcFrameStream,
  chunks: readonly ElementRange[],
  options: PartExchangeOptions,
  outcome: PartExchangeOutcome,
  window: ResultWindow,
): Promise<void> {
  const memberCount = options.plan.group.members.length;
  const { resultTimeoutMs, activity } = options;
  const reducer = options.plan.group.members[options.partIndex]?.peerId ?? "";
  const read = async (k: number): Promise<Uint8Array | null> => {
    if (resultTimeoutMs === undefined) return stream.read({ signal: options.signal });
    const stalled = new AbortController();
    const timer = silenceTimeout(activity, reducer, resultTimeoutMs, () => {
      stalled.abort(
        new SwarmError(
          SwarmErrorCode.TIMEOUT,
          `no result ${k} within ${resultTimeoutMs} ms of the last, and nothing else from it: the reducer is frozen or cut off`,
        ),
      );
    });
    try {
      return await stream.read({ signal: AbortSignal.any([options.signal, stalled.signal]) });
    } catch (error) {
      throw stalled.signal.aborted ? stalled.signal.reason : error;
    } finally {
      timer.clear();
    }
  };
  for (const [k, chunk] of chunks.entries()) {
    const frame = await read(k);
    if (frame === null) {
      throw new SwarmError(
        SwarmErrorCode.PEER_UNREACHABLE,
        `stream closed after ${k} of ${chunks.length} results`,
      );
    }
    activity?.heard(reducer);
    const refusal = refusalOf(frame);
    if (refusal !== undefined) {
      throw new SwarmError(SwarmErrorCode.ALLREDUCE_REFUSED, `refused by reducer ${reducer}: ${refusal}`, {
        peer: reducer,
        remoteCode: refusal,
      });
    }
    outcome.bytesReceived += frame.length;
    const length = chunk.end - chunk.start;
    const result = decodeResultFrame(frame, k, length, memberCount);
    const values = decompress(result.payload, length);
    assertFinite(values, `result ${k}`);
    options.output.set(values, chunk.start);
    outcome.chunkWeights.push(result.totalWeight);
    outcome.chunkContributors.push(result.contributors.slice());
    window.received = k + 1;
    window.wake.notify();
  }
  if ((await stream.read({ signal: options.signal })) !== null) {
    throw new SwarmError(
      SwarmErrorCode.MALFORMED_MESSAGE,
      `reducer sent a frame after its ${chunks.length} results`,
    );
  }
}
