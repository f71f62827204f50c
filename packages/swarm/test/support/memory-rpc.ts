import { isProtocolError, type AccessPass } from "@barnraise/protocol";
import { SwarmError, SwarmErrorCode, isSwarmError } from "../../src/errors.ts";
import { decodeMessage, encodeMessage } from "../../src/rpc/codec.ts";
import type {
  PeerIdString,
  Rpc,
  RpcCallOptions,
  RpcCallResult,
  RpcFrameStream,
  RpcHandler,
  RpcMethod,
  RpcPeer,
} from "../../src/rpc/rpc.ts";

/**
 * An in-process fake of the `Rpc` contract for unit tests: no crypto and no sockets, but the same
 * observable behaviour — heads round-trip through CBOR and the method's schemas, frames are capped
 * and queued with backpressure, and `kill(peer)` breaks every stream of that peer mid-exchange.
 * Multi-peer tests over real libp2p use `Libp2pRpc` instead.
 */
export class MemoryRpcNetwork {
  readonly #nodes = new Map<PeerIdString, MemoryRpc>();

  /** Adds a peer. `role` fills its fake pass (aux peers reduce with weight 0). */
  add(peerId: PeerIdString, role: "trainer" | "aux" = "trainer"): MemoryRpc {
    const node = new MemoryRpc(this, { peerId, pass: fakePass(peerId, role) });
    this.#nodes.set(peerId, node);
    return node;
  }

  /** The peer disappears: new calls to or from it fail, and its open streams break. */
  kill(peerId: PeerIdString): void {
    const node = this.#nodes.get(peerId);
    if (node === undefined) return;
    this.#nodes.delete(peerId);
    node.shutdown();
  }

  get(peerId: PeerIdString): MemoryRpc | undefined {
    return this.#nodes.get(peerId);
  }
}

export class MemoryRpc implements Rpc {
  readonly peerId: PeerIdString;
  readonly self: RpcPeer;
  readonly #network: MemoryRpcNetwork;
  readonly #handlers = new Map<string, RpcHandler<unknown, unknown>>();
  readonly #methods = new Map<string, RpcMethod<unknown, unknown>>();
  readonly #streams = new Set<MemoryFrameStream>();
  readonly #stopped = new AbortController();

  constructor(network: MemoryRpcNetwork, self: RpcPeer) {
    this.#network = network;
    this.self = self;
    this.peerId = self.peerId;
  }

  handle<Request, Response>(
    method: RpcMethod<Request, Response>,
    handler: RpcHandler<Request, Response>,
  ): void {
    this.#handlers.set(method.name, handler as RpcHandler<unknown, unknown>);
    this.#methods.set(method.name, method);
  }

  unhandle(method: { readonly name: string }): void {
    this.#handlers.delete(method.name);
    this.#methods.delete(method.name);
  }

  async call<Request, Response>(
    peer: PeerIdString,
    method: RpcMethod<Request, Response>,
    head: Request,
    options: RpcCallOptions = {},
  ): Promise<RpcCallResult<Response>> {
    if (this.#stopped.signal.aborted) throw new SwarmError(SwarmErrorCode.NOT_RUNNING, "node is stopped");
    const remote = this.#network.get(peer);
    const handler = remote === undefined ? undefined : remote.#handlers.get(method.name);
    const served = remote === undefined ? undefined : remote.#methods.get(method.name);
    if (remote === undefined || handler === undefined || served === undefined) {
      throw new SwarmError(SwarmErrorCode.PEER_UNREACHABLE, `cannot reach ${peer} for ${method.name}`, {
        peer,
      });
    }
    const [mine, theirs] = MemoryFrameStream.pair(method.maxFrameBytes);
    this.#track(mine);
    remote.#track(theirs);
    const requestHead = decodeMessage(encodeMessage(head), served.request, "request head");
    const responded = Promise.withResolvers<Response>();
    const signal = AbortSignal.any([remote.#stopped.signal, theirs.signal]);
    let answered = false;
    // A named function rather than an IIFE, so `answered` is not narrowed to `false` inside it.
    const serve = async (): Promise<void> => {
      try {
        await handler({
          from: this.self,
          head: requestHead,
          signal,
          respond: (response) => {
            if (answered) return Promise.reject(new Error("respond called twice"));
            answered = true;
            try {
              responded.resolve(decodeMessage(encodeMessage(response), method.response, "response head"));
            } catch (error) {
              return Promise.reject(error instanceof Error ? error : new Error(String(error)));
            }
            return Promise.resolve(theirs);
          },
        });
        if (!answered) throw new Error("handler returned without responding");
      } catch (error) {
        if (!answered) {
          answered = true;
          // Like Libp2pRpc: swarm and protocol codes reach the caller, anything else is INTERNAL.
          const code = isSwarmError(error) || isProtocolError(error) ? error.code : "INTERNAL";
          responded.reject(
            new SwarmError(SwarmErrorCode.REMOTE_ERROR, `${peer} refused ${method.name}: ${String(error)}`, {
              remoteCode: code,
              peer,
            }),
          );
        } else {
          theirs.abort(error instanceof Error ? error : new Error(String(error)));
        }
      }
    };
    void serve();
    const timeout = options.timeoutMs ?? 10_000;
    const responseHead = await raceWithTimeout(responded.promise, timeout, options.signal, mine);
    return { head: responseHead, from: remote.self, stream: mine };
  }

  async request<Request, Response>(
    peer: PeerIdString,
    method: RpcMethod<Request, Response>,
    head: Request,
    options?: RpcCallOptions,
  ): Promise<Response> {
    const result = await this.call(peer, method, head, options);
    await result.stream.closeWrite();
    return result.head;
  }

  shutdown(): void {
    this.#stopped.abort(new SwarmError(SwarmErrorCode.ABORTED, `${this.peerId} stopped`));
    for (const stream of this.#streams)
      stream.abort(new SwarmError(SwarmErrorCode.PEER_UNREACHABLE, `${this.peerId} left`));
  }

  #track(stream: MemoryFrameStream): void {
    this.#streams.add(stream);
    stream.signal.addEventListener("abort", () => this.#streams.delete(stream), { once: true });
  }
}

async function raceWithTimeout<T>(
  promise: Promise<T>,
  timeoutMs: number,
  signal: AbortSignal | undefined,
  stream: MemoryFrameStream,
): Promise<T> {
  // The time limit covers the response head only; it is disarmed as soon as the head arrives.
  let timer: NodeJS.Timeout | undefined;
  let onAbort: (() => void) | undefined;
  const limited = new Promise<never>((_, reject) => {
    const fail = (error: SwarmError) => {
      stream.abort(error);
      reject(error);
    };
    timer = setTimeout(() => {
      fail(new SwarmError(SwarmErrorCode.TIMEOUT, `no response within ${timeoutMs} ms`));
    }, timeoutMs);
    onAbort = () => {
      fail(new SwarmError(SwarmErrorCode.ABORTED, "call aborted"));
    };
    if (signal?.aborted === true) onAbort();
    else signal?.addEventListener("abort", onAbort, { once: true });
  });
  try {
    return await Promise.race([promise, limited]);
  } finally {
    clearTimeout(timer);
    if (onAbort !== undefined) signal?.removeEventListener("abort", onAbort);
  }
}

const QUEUE_FRAMES = 4;

/** One direction of a stream pair: a bounded queue of frames. */
class MemoryFrameStream implements RpcFrameStream {
  readonly #controller = new AbortController();
  readonly signal = this.#controller.signal;
  readonly #maxFrameBytes: number;
  #peer!: MemoryFrameStream;
  readonly #inbox: Array<Uint8Array | null> = [];
  #readWaiter: PromiseWithResolvers<undefined> | undefined;
  #drainWaiter: PromiseWithResolvers<undefined> | undefined;
  #writeClosed = false;

  private constructor(maxFrameBytes: number) {
    this.#maxFrameBytes = maxFrameBytes;
  }

  static pair(maxFrameBytes: number): [MemoryFrameStream, MemoryFrameStream] {
    const a = new MemoryFrameStream(maxFrameBytes);
    const b = new MemoryFrameStream(maxFrameBytes);
    a.#peer = b;
    b.#peer = a;
    return [a, b];
  }

  async read(options: { signal?: AbortSignal } = {}): Promise<Uint8Array | null> {
    for (;;) {
      this.#throwIfAborted(options.signal);
      const frame = this.#inbox.shift();
      if (frame !== undefined) {
        this.#peer.#drainWaiter?.resolve(undefined);
        return frame;
      }
      this.#readWaiter = Promise.withResolvers<undefined>();
      await this.#waitOrAbort(this.#readWaiter.promise, options.signal);
    }
  }

  async write(frame: Uint8Array, options: { signal?: AbortSignal } = {}): Promise<void> {
    this.#throwIfAborted(options.signal);
    if (this.#writeClosed)
      throw new SwarmError(SwarmErrorCode.PEER_UNREACHABLE, "stream is closed for writing");
    if (frame.length > this.#maxFrameBytes) {
      throw new SwarmError(
        SwarmErrorCode.OVERSIZED_MESSAGE,
        `frame of ${frame.length} bytes exceeds ${this.#maxFrameBytes}`,
      );
    }
    this.#peer.#inbox.push(frame.slice());
    this.#peer.#readWaiter?.resolve(undefined);
    while (this.#peer.#inbox.length > QUEUE_FRAMES) {
      this.#throwIfAborted(options.signal);
      this.#drainWaiter = Promise.withResolvers<undefined>();
      await this.#waitOrAbort(this.#drainWaiter.promise, options.signal);
    }
  }

  closeWrite(): Promise<void> {
    if (this.#writeClosed || this.signal.aborted) return Promise.resolve();
    this.#writeClosed = true;
    this.#peer.#inbox.push(null);
    this.#peer.#readWaiter?.resolve(undefined);
    return Promise.resolve();
  }

  abort(reason: Error): void {
    if (!this.signal.aborted) this.#controller.abort(reason);
    if (!this.#peer.signal.aborted) this.#peer.#controller.abort(reason);
  }

  #throwIfAborted(signal: AbortSignal | undefined): void {
    if (this.signal.aborted) throw toSwarmError(this.signal.reason);
    if (signal?.aborted) throw new SwarmError(SwarmErrorCode.ABORTED, "aborted by caller");
  }

  async #waitOrAbort(promise: Promise<undefined>, signal: AbortSignal | undefined): Promise<void> {
    const signals = signal === undefined ? [this.signal] : [this.signal, signal];
    const any = AbortSignal.any(signals);
    if (any.aborted) return;
    await new Promise<void>((resolve) => {
      any.addEventListener(
        "abort",
        () => {
          resolve();
        },
        { once: true },
      );
      void promise.then(resolve);
    });
  }
}

function toSwarmError(reason: unknown): SwarmError {
  if (isSwarmError(reason)) return reason;
  return new SwarmError(SwarmErrorCode.PEER_UNREACHABLE, `stream broke: ${String(reason)}`, {
    cause: reason,
  });
}

function fakePass(peerId: string, role: "trainer" | "aux"): AccessPass {
  return {
    experimentId: "memory",
    username: `user-${peerId}`,
    role,
    peerPublicKey: new Uint8Array(32),
    grant: `token-${peerId}`,
    issuedAt: 0,
    expiresAt: Number.MAX_SAFE_INTEGER,
    token: `memory-pass-${peerId}`,
  };
}
