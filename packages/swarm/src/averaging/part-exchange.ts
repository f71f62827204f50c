import { decompress, type Compressor } from "../compression/index.ts";
import { SwarmError, SwarmErrorCode } from "../errors.ts";
import type { Rpc, RpcFrameStream } from "../rpc/rpc.ts";
import { allReduceMethod, assertFinite, decodeResultFrame, encodeChunkFrame } from "./allreduce-messages.ts";
import { chunkRanges, type ElementRange, type RoundPlan } from "./partition.ts";
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
  /** Where the averaged part goes. */
  output: Float32Array;
  chunkElements: number;
  /** Chunks written ahead of the results read back (end-to-end flow control, at least 1). */
  chunksInFlight: number;
  compressor: Compressor;
  signal: AbortSignal;
  timeoutMs: number;
}

/** What one exchange moved and what the reducer reported per chunk. */
export interface PartExchangeOutcome {
  bytesSent: number;
  bytesReceived: number;
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
 * Any failure of the reducer (unreachable, broken stream, timeout, malformed result) rejects with
 * ALLREDUCE_FAILED: this member cannot complete the round without that part.
 */
export async function exchangePart(options: PartExchangeOptions): Promise<PartExchangeOutcome> {
  const { rpc, plan, partIndex, signal } = options;
  const reducer = plan.group.members[partIndex]?.peerId ?? "";
  const chunks = chunkRanges(0, options.values.length, options.chunkElements);
  const outcome: PartExchangeOutcome = {
    bytesSent: 0,
    bytesReceived: 0,
    chunkWeights: [],
    chunkContributors: [],
  };
  const failed = (error: unknown) =>
    new SwarmError(
      SwarmErrorCode.ALLREDUCE_FAILED,
      `part ${partIndex} from ${reducer} failed: ${error instanceof Error ? error.message : String(error)}`,
      { cause: error, peer: reducer },
    );
  let stream: RpcFrameStream;
  try {
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
      { signal, timeoutMs: options.timeoutMs },
    );
    stream = call.stream;
    if (call.head.chunkCount !== chunks.length) {
      throw new SwarmError(
        SwarmErrorCode.MALFORMED_MESSAGE,
        `reducer announced ${call.head.chunkCount} chunks, not ${chunks.length}`,
      );
    }
  } catch (error) {
    throw failed(error);
  }
  const abortOnError = (error: unknown) => {
    stream.abort(error instanceof Error ? error : new Error(String(error)));
    throw error;
  };
  const window: ResultWindow = { received: 0, stopped: false, wake: new Wakeup() };
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
}

async function sendChunks(
  stream: RpcFrameStream,
  chunks: readonly ElementRange[],
  options: PartExchangeOptions,
  outcome: PartExchangeOutcome,
  window: ResultWindow,
): Promise<void> {
  const inFlight = Math.max(1, options.chunksInFlight);
  for (const [k, chunk] of chunks.entries()) {
    while (k - window.received >= inFlight) {
      if (window.stopped) {
        throw new SwarmError(SwarmErrorCode.PEER_UNREACHABLE, `results stopped before chunk ${k} was sent`);
      }
      await window.wake.wait();
    }
    const frame = encodeChunkFrame(
      k,
      options.compressor.compress(options.values.subarray(chunk.start, chunk.end)),
    );
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
  for (const [k, chunk] of chunks.entries()) {
    const frame = await stream.read({ signal: options.signal });
    if (frame === null) {
      throw new SwarmError(
        SwarmErrorCode.PEER_UNREACHABLE,
        `stream closed after ${k} of ${chunks.length} results`,
      );
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
