import {
  decodeAccessPassUnverified,
  ed25519PublicKeyFromPeerId,
  equalBytes,
  isProtocolError,
  signedRequestPassUnverified,
  NONCE_BYTES,
  signRequest,
  signResponse,
  verifyResponse,
  type AccessPass,
  type AccessPassVerifier,
  type CryptoProvider,
  type KeyPair,
  type RequestVerifier,
} from "@barnraise/protocol";
import type { Connection, Libp2p, Stream } from "@libp2p/interface";
import { peerIdFromString } from "@libp2p/peer-id";
import type { Logger } from "pino";
import { z } from "zod";
import { SwarmError, SwarmErrorCode, isSwarmError } from "../errors.ts";
import { decodeMessage, encodeMessage, MAX_HEAD_BYTES } from "./codec.ts";
import type { TrafficCaps } from "./traffic-caps.ts";
import { Libp2pFrameStream, toSwarmError } from "./frame-stream.ts";
import {
  DEFAULT_REQUEST_TIMEOUT_MS,
  type PeerIdString,
  type Rpc,
  type RpcCallOptions,
  type RpcCallResult,
  type RpcHandler,
  type RpcMethod,
  type RpcPeer,
} from "./rpc.ts";
import { stallAwareSignal } from "../time/stall-aware-timeout.ts";

/** The first frame each way. The signed token covers `head` byte for byte (its body digest). */
const requestEnvelope = z.strictObject({ token: z.string().max(8192), head: z.instanceof(Uint8Array) });
const responseEnvelope = z.union([
  z.strictObject({ token: z.string().max(8192), head: z.instanceof(Uint8Array) }),
  z.strictObject({
    error: z.strictObject({ code: z.string().max(64), message: z.string().max(1024) }),
  }),
]);
const ENVELOPE_BYTES = MAX_HEAD_BYTES + (16 << 10);

export interface Libp2pRpcOptions {
  node: Libp2p;
  experimentId: string;
  identity: KeyPair;
  crypto: CryptoProvider;
  /** Verifies passes of responders (the caller side). */
  passes: AccessPassVerifier;
  /** Verifies signed requests addressed to this node (the handler side), with its replay guard. */
  requests: RequestVerifier;
  /** This node's current pass token (refreshed behind the scenes). */
  currentPass: () => string;
  /** Told about every peer whose pass was verified, so the connection gate knows it. */
  onVerifiedPeer?: (peerId: PeerIdString, pass: AccessPass) => void;
  /**
   * Told when this node refused a caller's signed request for its credentials (see
   * `isCredentialRefusal`), with the ProtocolError's code and message, and whether the pass it showed
   * names the caller's own key (read unverified: a pass the authority signed when the code says its
   * signature checked out, such as PASS_REVOKED or PASS_EXPIRED).
   */
  onRefusedPeer?: (peerId: PeerIdString, code: string, reason: string, ownPass: boolean) => void;
  /**
   * Told when a peer refused this node's signed request for its pass or signature (a remote
   * PASS_… or REQUEST_… code), with that code and the peer's message.
   */
  onRefusedBy?: (peerId: PeerIdString, code: string, reason: string) => void;
  logger: Logger;
  now?: () => number;
  /** The volunteer's caps on this node's upload and download (see TrafficCaps); default none. */
  caps?: TrafficCaps;
}

/** The protocol id of a method inside one experiment's private swarm. */
export function protocolId(experimentId: string, name: string): string {
  return `/barnraise/${experimentId}/${name}/1.0.0`;
}

/**
 * `Rpc` over libp2p streams. Every exchange starts with a DeDLOC I.5 signed request (the caller's
 * pass, this node as recipient, the protocol id as scope, a fresh nonce, the head's digest) bound
 * to the connection's Noise-authenticated peer, and is answered by a signed response echoing the
 * nonce. Frames that follow travel on the same Noise-encrypted, authenticated stream.
 */
export class Libp2pRpc implements Rpc {
  readonly peerId: PeerIdString;
  readonly #options: Libp2pRpcOptions;
  readonly #now: () => number;
  readonly #stopped = new AbortController();
  readonly #served = new Set<string>();

  constructor(options: Libp2pRpcOptions) {
    this.#options = options;
    this.peerId = options.node.peerId.toString();
    this.#now = options.now ?? Date.now;
  }

  roundTripMs(peer: PeerIdString): number | undefined {
    let best: number | undefined;
    for (const connection of this.#options.node.getConnections(peerIdFromString(peer))) {
      const rtt = connection.rtt;
      if (rtt !== undefined && rtt >= 0 && (best === undefined || rtt < best)) best = rtt;
    }
    return best;
  }

  async call<Request, Response>(
    peer: PeerIdString,
    method: RpcMethod<Request, Response>,
    head: Request,
    options: RpcCallOptions = {},
  ): Promise<RpcCallResult<Response>> {
    const { node, crypto, identity } = this.#options;
    if (this.#stopped.signal.aborted) throw new SwarmError(SwarmErrorCode.NOT_RUNNING, "rpc is stopped");
    const protocol = protocolId(this.#options.experimentId, method.name);
    // Deadlines computed from measured rates are fractional; whole ms are enough. They do not count
    // the time this process could not run (see stall-aware-timeout.ts).
    const timeoutMs = Math.ceil(options.timeoutMs ?? 10_000);
    const signal = anySignal(stallAwareSignal(timeoutMs), options.signal, this.#stopped.signal);
    const responderKey = publicKeyOf(peer);
    let raw: Stream;
    try {
      raw = await node.dialProtocol(peerIdFromString(peer), protocol, {
        signal,
        runOnLimitedConnection: true,
      });
    } catch (cause) {
      throw new SwarmError(
        SwarmErrorCode.PEER_UNREACHABLE,
        `cannot open ${method.name} to ${peer}: ${String(cause)}`,
        {
          cause,
          peer,
        },
      );
    }
    const stream = new Libp2pFrameStream(raw, Math.max(method.maxFrameBytes, ENVELOPE_BYTES), {
      caps: this.#options.caps ?? {},
    });
    try {
      const headBytes = encodeMessage(method.request.parse(head));
      const nonce = globalThis.crypto.getRandomValues(new Uint8Array(NONCE_BYTES));
      const token = signRequest(crypto, identity, {
        pass: this.#options.currentPass(),
        recipientPublicKey: responderKey,
        scope: protocol,
        body: headBytes,
        time: this.#now(),
        nonce,
      });
      await stream.write(encodeMessage({ token, head: headBytes }), { signal });
      const first = await stream.read({ signal });
      if (first === null)
        throw new SwarmError(
          SwarmErrorCode.PEER_UNREACHABLE,
          `${peer} closed ${method.name} without answering`,
          { peer },
        );
      const envelope = decodeMessage(first, responseEnvelope, `${method.name} response`, ENVELOPE_BYTES);
      if ("error" in envelope) {
        if (isCredentialRefusal(envelope.error.code)) {
          this.#options.onRefusedBy?.(peer, envelope.error.code, envelope.error.message);
        }
        throw new SwarmError(
          SwarmErrorCode.REMOTE_ERROR,
          `${peer} refused ${method.name}: ${envelope.error.message}`,
          {
            remoteCode: envelope.error.code,
            peer,
          },
        );
      }
      const pass = verifyResponse(crypto, this.#options.passes, envelope.token, {
        responderPublicKey: responderKey,
        requestNonce: nonce,
        body: envelope.head,
        now: this.#now(),
      });
      this.#options.onVerifiedPeer?.(peer, pass);
      const responseHead = decodeMessage(envelope.head, method.response, `${method.name} response head`);
      return { head: responseHead, from: { peerId: peer, pass }, stream };
    } catch (cause) {
      const error =
        signal.aborted && !isSwarmError(cause, SwarmErrorCode.REMOTE_ERROR)
          ? new SwarmError(
              SwarmErrorCode.TIMEOUT,
              `${method.name} to ${peer}: no answer within ${timeoutMs} ms`,
              { cause, peer },
            )
          : isProtocolError(cause)
            ? cause
            : toSwarmError(cause, `${method.name} to ${peer}`);
      stream.abort(error);
      throw error;
    }
  }

  async request<Request, Response>(
    peer: PeerIdString,
    method: RpcMethod<Request, Response>,
    head: Request,
    options?: RpcCallOptions,
  ): Promise<Response> {
    const { head: response, stream } = await this.call(peer, method, head, options);
    await stream.closeWrite();
    return response;
  }

  handle<Request, Response>(
    method: RpcMethod<Request, Response>,
    handler: RpcHandler<Request, Response>,
  ): void {
    const protocol = protocolId(this.#options.experimentId, method.name);
    this.#served.add(protocol);
    void this.#options.node.handle(
      protocol,
      (stream, connection) => this.#serve(protocol, method, handler, stream, connection),
      { runOnLimitedConnection: true, maxInboundStreams: 256, maxOutboundStreams: 256, force: true },
    );
  }

  unhandle(method: { readonly name: string }): void {
    const protocol = protocolId(this.#options.experimentId, method.name);
    this.#served.delete(protocol);
    void this.#options.node.unhandle(protocol);
  }

  /** Whether `protocol` is one of this layer's signed methods (which need no pass gate in front). */
  serves(protocol: string): boolean {
    return this.#served.has(protocol);
  }

  /** Fails every open call at once; the node itself is stopped by its owner. */
  stop(): void {
    this.#stopped.abort(new SwarmError(SwarmErrorCode.NOT_RUNNING, "rpc stopped"));
  }

  async #serve<Request, Response>(
    protocol: string,
    method: RpcMethod<Request, Response>,
    handler: RpcHandler<Request, Response>,
    raw: Stream,
    connection: Connection,
  ): Promise<void> {
    const { crypto, identity, logger } = this.#options;
    const peer = connection.remotePeer.toString();
    const stream = new Libp2pFrameStream(raw, Math.max(method.maxFrameBytes, ENVELOPE_BYTES), {
      caps: this.#options.caps ?? {},
    });
    const signal = anySignal(this.#stopped.signal);
    const progress = { responded: false };
    let from: RpcPeer | undefined;
    try {
      const requestTimeoutMs = method.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
      const waited = stallAwareSignal(requestTimeoutMs);
      const first = await stream.read({ signal: anySignal(waited, signal) }).catch((error: unknown) => {
        if (!waited.aborted) throw error;
        throw new SwarmError(
          SwarmErrorCode.TIMEOUT,
          `no ${method.name} request within ${requestTimeoutMs} ms`,
        );
      });
      if (first === null) return;
      const envelope = decodeMessage(first, requestEnvelope, `${method.name} request`, ENVELOPE_BYTES);
      const verified = await this.#options.requests
        .verify(envelope.token, {
          scope: protocol,
          body: envelope.head,
          now: this.#now(),
          sender: publicKeyOf(peer),
        })
        .catch((error: unknown) => {
          if (isProtocolError(error) && isCredentialRefusal(error.code)) {
            this.#options.onRefusedPeer?.(
              peer,
              error.code,
              error.message,
              passNamesSender(envelope.token, peer),
            );
          }
          throw error;
        });
      from = { peerId: peer, pass: verified.pass, remoteAddr: connection.remoteAddr.toString() };
      this.#options.onVerifiedPeer?.(peer, verified.pass);
      const head = decodeMessage(envelope.head, method.request, `${method.name} request head`);
      await handler({
        from,
        head,
        signal,
        respond: async (response) => {
          if (progress.responded) throw new Error(`${method.name}: respond called twice`);
          progress.responded = true;
          const bytes = encodeMessage(method.response.parse(response));
          const token = signResponse(crypto, identity, {
            pass: this.#options.currentPass(),
            requestNonce: verified.nonce,
            body: bytes,
          });
          await stream.write(encodeMessage({ token, head: bytes }));
          return stream;
        },
      });
      if (!progress.responded) throw new Error(`${method.name} handler returned without responding`);
      await stream.closeWrite();
    } catch (error) {
      const code = isSwarmError(error) || isProtocolError(error) ? error.code : "INTERNAL";
      const message = isSwarmError(error) || isProtocolError(error) ? error.message : "internal error";
      logger.debug({ peer, method: method.name, code, err: error }, "rpc refused or failed");
      if (!progress.responded && raw.status === "open") {
        try {
          await stream.write(encodeMessage({ error: { code, message: message.slice(0, 1024) } }));
          await stream.closeWrite();
          return;
        } catch {
          // the peer is gone; nothing more to tell it
        }
      }
      stream.abort(error instanceof Error ? error : new Error(String(error)));
    }
  }
}

/**
 * Whether a refusal is about the caller's credentials (its pass, or its signature with it), as
 * opposed to a malformed message, a replay or a busy peer: such a refusal says the swarm does not
 * accept this node, and why.
 */
export function isCredentialRefusal(code: string): boolean {
  return (
    code.startsWith("PASS_") ||
    code === "REQUEST_BAD_SIGNATURE" ||
    code === "REQUEST_WRONG_SENDER" ||
    code === "REQUEST_CLOCK_SKEW"
  );
}

/** Whether the pass in a signed request names `peer`'s own key (read unverified). */
function passNamesSender(token: string, peer: PeerIdString): boolean {
  const pass = signedRequestPassUnverified(token);
  if (pass === undefined) return false;
  try {
    return equalBytes(decodeAccessPassUnverified(pass).peerPublicKey, publicKeyOf(peer));
  } catch {
    return false;
  }
}

function publicKeyOf(peer: PeerIdString): Uint8Array {
  try {
    return ed25519PublicKeyFromPeerId(peer);
  } catch (cause) {
    throw new SwarmError(SwarmErrorCode.UNAUTHORIZED_PEER, `${peer} is not an Ed25519 peer id`, {
      cause,
      peer,
    });
  }
}

function anySignal(...signals: Array<AbortSignal | undefined>): AbortSignal {
  return AbortSignal.any(signals.filter((signal): signal is AbortSignal => signal !== undefined));
}
