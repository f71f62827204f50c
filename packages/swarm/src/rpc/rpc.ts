import type { AccessPass } from "@barnraise/protocol";
import type { z } from "zod";

/**
 * The contract between the swarm's protocols (progress, matchmaking, all-reduce, state sharing)
 * and the network. `Libp2pRpc` implements it over libp2p streams with DeDLOC I.5 signed requests
 * and responses; unit tests use `MemoryRpcNetwork` (test/support) behind the same interface.
 *
 * An exchange is: the caller sends a signed request carrying a small CBOR `head`; the handler
 * answers with a signed response carrying its own `head` (or a typed error). After that both
 * sides may send raw frames (a streamed body: gradient chunks, state bytes) in both directions
 * over the same authenticated stream, with backpressure.
 */

/** A PeerId in its string form (base58btc). */
export type PeerIdString = string;

/** One kind of exchange: a protocol name and the schemas of both heads. */
export interface RpcMethod<Request, Response> {
  /** Short name, e.g. "allreduce"; the wire protocol id is `/barnraise/<experiment>/<name>/1.0.0`. */
  readonly name: string;
  readonly request: z.ZodType<Request>;
  readonly response: z.ZodType<Response>;
  /** Largest raw frame either side may send after the heads (the heads themselves are capped at 64 KiB). */
  readonly maxFrameBytes: number;
  /**
   * How long the responder waits for the signed request once the stream is open; default
   * DEFAULT_REQUEST_TIMEOUT_MS. A stream that brings nothing in time is answered with TIMEOUT.
   */
  readonly requestTimeoutMs?: number;
}

/** The responder's default wait for a request after its stream opened. */
export const DEFAULT_REQUEST_TIMEOUT_MS = 10_000;

export function defineMethod<Request, Response>(
  method: RpcMethod<Request, Response>,
): RpcMethod<Request, Response> {
  return method;
}

export interface RpcPeer {
  readonly peerId: PeerIdString;
  /** The remote peer's verified access pass (its username and role). */
  readonly pass: AccessPass;
  /** The address the request's connection comes from, as this node sees it, when known. */
  readonly remoteAddr?: string;
}

/** Frames after the heads. Reads and writes reject with a `SwarmError` (TIMEOUT, ABORTED, PEER_UNREACHABLE, OVERSIZED_MESSAGE). */
export interface RpcFrameStream {
  /** The next frame, or `null` once the remote side has closed its writing end. */
  read(options?: { signal?: AbortSignal }): Promise<Uint8Array | null>;
  /** Sends one frame; resolves when the transport can take more (backpressure). */
  write(frame: Uint8Array, options?: { signal?: AbortSignal }): Promise<void>;
  /** Closes the writing end; the remote's `read` then returns `null`. */
  closeWrite(): Promise<void>;
  /** Tears the stream down at once; pending and later reads and writes on both sides fail. */
  abort(reason: Error): void;
}

export interface RpcCallOptions {
  signal?: AbortSignal;
  /** Milliseconds to wait for the response head; default 10 s. */
  timeoutMs?: number;
}

export interface RpcCallResult<Response> {
  readonly head: Response;
  readonly from: RpcPeer;
  readonly stream: RpcFrameStream;
}

export interface RpcIncoming<Request, Response> {
  readonly from: RpcPeer;
  readonly head: Request;
  /** Aborted when the node stops or the stream breaks. */
  readonly signal: AbortSignal;
  /**
   * Sends the signed response head. Call it exactly once, before writing frames; throwing a
   * `SwarmError` from the handler before responding sends that error to the caller instead.
   */
  respond(head: Response): Promise<RpcFrameStream>;
}

export type RpcHandler<Request, Response> = (incoming: RpcIncoming<Request, Response>) => Promise<void>;

export interface Rpc {
  readonly peerId: PeerIdString;
  /**
   * Opens an exchange: signed request, verified signed response. The caller must `closeWrite` or
   * `abort` the returned stream when done (`request` does it for unary calls).
   */
  call<Request, Response>(
    peer: PeerIdString,
    method: RpcMethod<Request, Response>,
    head: Request,
    options?: RpcCallOptions,
  ): Promise<RpcCallResult<Response>>;
  /** A unary exchange: request head in, response head out, stream closed. */
  request<Request, Response>(
    peer: PeerIdString,
    method: RpcMethod<Request, Response>,
    head: Request,
    options?: RpcCallOptions,
  ): Promise<Response>;
  /** Serves a method. Malformed heads, bad signatures and replays are refused before `handler` runs. */
  handle<Request, Response>(
    method: RpcMethod<Request, Response>,
    handler: RpcHandler<Request, Response>,
  ): void;
  unhandle(method: { readonly name: string }): void;
  /**
   * The round trip to `peer` last measured on an open connection (libp2p's connection monitor
   * pings every 10 s), in milliseconds; absent where the transport measures none.
   */
  roundTripMs?(peer: PeerIdString): number | undefined;
}
