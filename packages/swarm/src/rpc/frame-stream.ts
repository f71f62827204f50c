import type { Stream, StreamCloseEvent, StreamMessageEvent } from "@libp2p/interface";
import { Uint8ArrayList } from "uint8arraylist";
import { SwarmError, SwarmErrorCode, isSwarmError } from "../errors.ts";
import type { TrafficCaps } from "./traffic-caps.ts";
import type { RpcFrameStream } from "./rpc.ts";

const LENGTH_BYTES = 4;

/**
 * Frames over a libp2p v3 stream: each frame is a 4-byte big-endian length, then the bytes.
 *
 * Backpressure runs both ways. Writes wait for `drain` when the muxer's buffer is full. Reads keep
 * at most `highWaterBytes` buffered: above that the stream is paused (yamux stops granting the
 * sender window), and it resumes once the reader has caught up — so a slow reducer slows its
 * senders down instead of buffering without bound.
 *
 * With the volunteer's traffic caps, each frame written waits for its bytes at the upload cap, and
 * each frame read for its bytes at the download cap: a reader held back there stops taking from
 * the stream, which then pauses as above, so the sender is held to the cap as well.
 */
export class Libp2pFrameStream implements RpcFrameStream {
  readonly #stream: Stream;
  readonly #maxFrameBytes: number;
  readonly #highWaterBytes: number;
  readonly #buffer = new Uint8ArrayList();
  #ended = false;
  #error: SwarmError | undefined;
  #wake: PromiseWithResolvers<undefined> | undefined;
  #paused = false;
  readonly #caps: TrafficCaps;

  constructor(
    stream: Stream,
    maxFrameBytes: number,
    options: { readonly highWaterBytes?: number; readonly caps?: TrafficCaps } = {},
  ) {
    // Under a download cap, a new stream may not take in a megabyte at once: two frames at most.
    const highWaterBytes =
      options.highWaterBytes ??
      (options.caps?.download === undefined
        ? Math.max(4 * maxFrameBytes, 1 << 20)
        : Math.max(2 * (maxFrameBytes + LENGTH_BYTES), 64 << 10));
    this.#caps = options.caps ?? {};
    this.#stream = stream;
    this.#maxFrameBytes = maxFrameBytes;
    this.#highWaterBytes = highWaterBytes;
    stream.addEventListener("message", this.#onMessage);
    stream.addEventListener("remoteCloseWrite", this.#onRemoteCloseWrite);
    stream.addEventListener("close", this.#onClose);
    if (stream.status !== "open" && stream.readBufferLength === 0) this.#ended = true;
  }

  async read(options: { signal?: AbortSignal } = {}): Promise<Uint8Array | null> {
    for (;;) {
      const frame = this.#takeFrame();
      if (frame !== undefined) {
        await this.#caps.download?.take(LENGTH_BYTES + frame.length, options.signal);
        return frame;
      }
      if (this.#error !== undefined) throw this.#error;
      if (this.#ended) {
        if (this.#buffer.byteLength === 0) return null;
        throw new SwarmError(
          SwarmErrorCode.MALFORMED_MESSAGE,
          `stream ended inside a frame (${this.#buffer.byteLength} stray bytes)`,
        );
      }
      this.#wake = Promise.withResolvers<undefined>();
      await waitFor(this.#wake.promise, options.signal);
    }
  }

  async write(frame: Uint8Array, options: { signal?: AbortSignal } = {}): Promise<void> {
    if (this.#error !== undefined) throw this.#error;
    if (frame.length > this.#maxFrameBytes) {
      throw new SwarmError(
        SwarmErrorCode.OVERSIZED_MESSAGE,
        `frame of ${frame.length} bytes exceeds the limit of ${this.#maxFrameBytes}`,
      );
    }
    await this.#caps.upload?.take(LENGTH_BYTES + frame.length, options.signal);
    const header = new Uint8Array(LENGTH_BYTES);
    new DataView(header.buffer).setUint32(0, frame.length);
    try {
      // libp2p queues what it is given without copying; copy, so the caller may reuse its buffer.
      if (!this.#stream.send(new Uint8ArrayList(header, new Uint8Array(frame)))) {
        await this.#drained(options.signal);
      }
    } catch (cause) {
      throw this.#failure() ?? toSwarmError(cause, "write failed");
    }
  }

  /**
   * Waits for the stream's next `drain` event (or its end). Not `stream.onDrain()`: in
   * @libp2p/utils 7.4 that promise is made once and never renewed, so after the first drain it
   * resolves at once and a sender would queue its whole part without backpressure.
   */
  async #drained(signal: AbortSignal | undefined): Promise<void> {
    if (!this.#stream.writableNeedsDrain) return;
    await new Promise<void>((resolve, reject) => {
      const cleanup = () => {
        this.#stream.removeEventListener("drain", done);
        this.#stream.removeEventListener("close", done);
        signal?.removeEventListener("abort", aborted);
      };
      const done = () => {
        cleanup();
        resolve();
      };
      const aborted = () => {
        cleanup();
        reject(new SwarmError(SwarmErrorCode.ABORTED, "write aborted"));
      };
      this.#stream.addEventListener("drain", done);
      this.#stream.addEventListener("close", done);
      if (signal?.aborted === true) aborted();
      else signal?.addEventListener("abort", aborted, { once: true });
    });
    const failure = this.#failure();
    if (failure !== undefined) throw failure;
  }

  async closeWrite(): Promise<void> {
    if (this.#stream.status !== "open") return;
    try {
      await this.#stream.close();
    } catch (cause) {
      throw toSwarmError(cause, "close failed");
    }
  }

  abort(reason: Error): void {
    this.#fail(toSwarmError(reason, "aborted"));
    this.#stream.abort(reason);
  }

  #takeFrame(): Uint8Array | undefined {
    if (this.#buffer.byteLength < LENGTH_BYTES) return undefined;
    const length = this.#buffer.getUint32(0);
    if (length > this.#maxFrameBytes) {
      const error = new SwarmError(
        SwarmErrorCode.OVERSIZED_MESSAGE,
        `peer announced a frame of ${length} bytes, the limit is ${this.#maxFrameBytes}`,
      );
      this.abort(error);
      throw error;
    }
    if (this.#buffer.byteLength < LENGTH_BYTES + length) return undefined;
    // A fresh Uint8Array of its own: Uint8ArrayList may hand back a pooled Node Buffer, whose
    // `slice()` is a view, not a copy.
    const frame = new Uint8Array(length);
    frame.set(this.#buffer.subarray(LENGTH_BYTES, LENGTH_BYTES + length));
    this.#buffer.consume(LENGTH_BYTES + length);
    if (this.#paused && this.#buffer.byteLength < this.#highWaterBytes / 2) {
      this.#paused = false;
      this.#stream.resume();
    }
    return frame;
  }

  readonly #onMessage = (event: StreamMessageEvent): void => {
    this.#buffer.append(event.data);
    if (!this.#paused && this.#buffer.byteLength > this.#highWaterBytes) {
      this.#paused = true;
      this.#stream.pause();
    }
    this.#wake?.resolve(undefined);
  };

  readonly #onRemoteCloseWrite = (): void => {
    this.#ended = true;
    this.#wake?.resolve(undefined);
  };

  readonly #onClose = (event: StreamCloseEvent): void => {
    if (event.error !== undefined) this.#fail(toSwarmError(event.error, "stream closed"));
    this.#ended = true;
    this.#wake?.resolve(undefined);
  };

  #failure(): SwarmError | undefined {
    return this.#error;
  }

  #fail(error: SwarmError): void {
    this.#error ??= error;
    this.#wake?.resolve(undefined);
  }
}

async function waitFor(promise: Promise<undefined>, signal: AbortSignal | undefined): Promise<void> {
  if (signal === undefined) return promise;
  if (signal.aborted) throw new SwarmError(SwarmErrorCode.ABORTED, "read aborted");
  await new Promise<void>((resolve, reject) => {
    const onAbort = () => {
      reject(new SwarmError(SwarmErrorCode.ABORTED, "read aborted"));
    };
    signal.addEventListener("abort", onAbort, { once: true });
    void promise.then(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    });
  });
}

export function toSwarmError(cause: unknown, what: string): SwarmError {
  if (isSwarmError(cause)) return cause;
  const name = cause instanceof Error ? cause.name : "";
  if (name === "TimeoutError") return new SwarmError(SwarmErrorCode.TIMEOUT, `${what}: timed out`, { cause });
  if (name === "AbortError") return new SwarmError(SwarmErrorCode.ABORTED, `${what}: aborted`, { cause });
  return new SwarmError(SwarmErrorCode.PEER_UNREACHABLE, `${what}: ${String(cause)}`, { cause });
}
