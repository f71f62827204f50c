import { isProtocolError, verifyRunControl, type RunControl } from "@barnraise/protocol";
import { runtimeCrypto } from "@barnraise/protocol/runtime-crypto";
import type { Logger } from "pino";
import { isSwarmError, SwarmError, SwarmErrorCode } from "../errors.ts";
import type { RevocationList } from "../p2p/swarm-node.ts";
import type { AuthorityKeys } from "../platform/authority-keys.ts";
import { decodeMessage, encodeMessage } from "../rpc/codec.ts";
import type { PeerIdString, Rpc, RpcFrameStream, RpcIncoming } from "../rpc/rpc.ts";
import {
  CONTROL_FRAME_BYTES,
  controlMethod,
  controlResultSchema,
  type ControlRequest,
  type ControlResult,
} from "./control-messages.ts";

export interface RunControlBoardOptions {
  readonly rpc: Rpc;
  readonly experimentId: string;
  /**
   * The experiment's authority: only run controls signed by a key it trusts are taken (its current
   * key, or a key it replaced, in that key's grace period), read at each offer.
   */
  readonly authority: Pick<AuthorityKeys, "publicKey">;
  /** The members a newly adopted control is passed on to. */
  readonly peers: () => readonly PeerIdString[];
  /** Applies a control's revocation list to the node: refuse and hang up revoked peers. */
  readonly applyRevocations: (revoked: RevocationList) => void;
  readonly logger?: Pick<Logger, "debug" | "info" | "warn">;
  /** Time limit of one push, either way; default 10 s. */
  readonly timeoutMs?: number;
}

/** What `offer` made of a token. */
export interface RunControlOffer {
  /** Whether the token was newer than the control held, and so replaced it. */
  readonly adopted: boolean;
  /** The control held now. */
  readonly current: RunControl;
}

export type RunControlListener = (control: RunControl) => void;

/**
 * Where a token came from: the member that pushed it, or a word for what is not a member
 * ("platform", "local"). It is never passed back to its source.
 */
export type RunControlSource = string;

const UTF8 = new TextDecoder("utf-8", { fatal: true });

/**
 * The run control board (DESIGN §9): keeps the newest run control this node has seen — the
 * organizer's signed orders to pause, ban peers or roll the run back — whether it came from the
 * platform or from another node. A token is verified (authority signature, experiment) before
 * anything else; a newer version replaces the one held, its revocation list is applied to the node
 * at once, listeners hear of it, and it is passed on to every member but the one it came from, so
 * one node that hears from the platform (the aux) tells the whole swarm. Older or equal versions
 * change nothing and go no further. Members push tokens over the "control" exchange.
 */
export class RunControlBoard {
  readonly #options: RunControlBoardOptions;
  readonly #listeners = new Set<RunControlListener>();
  readonly #timeoutMs: number;
  #current: RunControl | null = null;
  #running: AbortController | null = null;

  constructor(options: RunControlBoardOptions) {
    this.#options = options;
    this.#timeoutMs = options.timeoutMs ?? 10_000;
  }

  /** Serves the "control" exchange. */
  start(): void {
    if (this.#running !== null) return;
    this.#running = new AbortController();
    this.#options.rpc.handle(controlMethod, (incoming) => this.#serve(incoming));
  }

  /** Stops serving and aborts the pushes in flight; the control held stays readable. */
  stop(): void {
    if (this.#running === null) return;
    this.#options.rpc.unhandle(controlMethod);
    this.#running.abort(new SwarmError(SwarmErrorCode.ABORTED, "run control board stopped"));
    this.#running = null;
  }

  /** The newest run control seen, or null before the first. */
  current(): RunControl | null {
    return this.#current;
  }

  /** Calls `listener` with every control adopted from now on; returns the unsubscribe function. */
  on(_event: "change", listener: RunControlListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /**
   * Takes a token from `source` (the member that pushed it, or "platform"): verifies it, adopts it
   * when its version is higher than the one held (revocations applied, listeners told, passed on to
   * every other member), and says what it did. Throws the ProtocolError of `verifyRunControl`
   * (CONTROL_BAD_SIGNATURE, CONTROL_WRONG_EXPERIMENT, MALFORMED …) for a token it refuses.
   */
  offer(token: string, source: RunControlSource = "local"): RunControlOffer {
    const held = this.#current;
    if (held !== null && token === held.token) return { adopted: false, current: held };
    let control: RunControl;
    try {
      control = this.#verify(token);
    } catch (error) {
      this.#options.logger?.warn(
        { source, code: codeOf(error), err: error },
        "refused a run control that does not verify",
      );
      throw error;
    }
    if (held !== null && control.version <= held.version) return { adopted: false, current: held };
    this.#current = control;
    this.#options.logger?.info(
      { source, version: control.version, status: control.status, generation: control.generation },
      "adopted a newer run control",
    );
    try {
      this.#options.applyRevocations({
        usernames: control.revokedUsernames,
        grants: control.revokedGrants,
      });
    } catch (error) {
      this.#options.logger?.warn({ err: error }, "applying the revocation list failed");
    }
    for (const listener of this.#listeners) {
      try {
        listener(control);
      } catch (error) {
        this.#options.logger?.warn({ err: error }, "a run control listener threw");
      }
    }
    this.#forward(control.token, source);
    return { adopted: true, current: control };
  }

  /**
   * Verifies `token` with the authority's current key only. A key the authority replaced signs no
   * control after its rotation (the platform signs the rotation's new control version with the new
   * key), and one that leaked must not: its holder could otherwise sign a control of any version and
   * keep the run paused, rolled back or unrevoked on every node for good.
   */
  #verify(token: string): RunControl {
    return verifyRunControl(runtimeCrypto, token, {
      authorityPublicKey: this.#options.authority.publicKey,
      experimentId: this.#options.experimentId,
    });
  }

  /**
   * Pushes `token` (default: the one held) to `peer` and resolves with what the peer made of it.
   * Rejects with REMOTE_ERROR (the peer's code in `remoteCode`) when the peer refused the token, or
   * with the exchange's error (PEER_UNREACHABLE, TIMEOUT …).
   */
  async push(
    peer: PeerIdString,
    token: string | undefined = this.#current?.token,
    signal?: AbortSignal,
  ): Promise<{ adopted: boolean; version: number }> {
    if (token === undefined) throw new SwarmError(SwarmErrorCode.NOT_RUNNING, "no run control to push yet");
    const running = this.#running;
    if (running === null)
      throw new SwarmError(SwarmErrorCode.NOT_RUNNING, "run control board is not started");
    const bytes = new TextEncoder().encode(token);
    const limit = AbortSignal.any([
      running.signal,
      AbortSignal.timeout(this.#timeoutMs),
      ...(signal === undefined ? [] : [signal]),
    ]);
    const { stream } = await this.#options.rpc.call(
      peer,
      controlMethod,
      { bytes: bytes.length },
      { signal: limit, timeoutMs: this.#timeoutMs },
    );
    try {
      for (let offset = 0; offset < bytes.length; offset += CONTROL_FRAME_BYTES) {
        await stream.write(bytes.subarray(offset, offset + CONTROL_FRAME_BYTES), { signal: limit });
      }
      await stream.closeWrite();
      const frame = await stream.read({ signal: limit });
      if (frame === null) {
        throw new SwarmError(SwarmErrorCode.PEER_UNREACHABLE, `${peer} closed without an answer`, { peer });
      }
      const result = decodeMessage(frame, controlResultSchema, "control result");
      if ("error" in result) {
        throw new SwarmError(
          SwarmErrorCode.REMOTE_ERROR,
          `${peer} refused the run control: ${result.error.message}`,
          { remoteCode: result.error.code, peer },
        );
      }
      return result;
    } catch (error) {
      stream.abort(error instanceof Error ? error : new Error(String(error)));
      throw error;
    }
  }

  /** Passes a newly adopted token on to every member but its source; failures are only logged. */
  #forward(token: string, source: RunControlSource): void {
    if (this.#running === null) return;
    let peers: readonly PeerIdString[];
    try {
      peers = this.#options.peers();
    } catch (error) {
      this.#options.logger?.debug({ err: error }, "listing peers to pass a run control on failed");
      return;
    }
    for (const peer of new Set(peers)) {
      if (peer === source || peer === this.#options.rpc.peerId) continue;
      this.push(peer, token).catch((error: unknown) => {
        this.#options.logger?.debug({ peer, err: error }, "passing the run control on failed");
      });
    }
  }

  async #serve(incoming: RpcIncoming<ControlRequest, { ok: true }>): Promise<void> {
    const stream = await incoming.respond({ ok: true });
    const signal = AbortSignal.any([incoming.signal, AbortSignal.timeout(this.#timeoutMs)]);
    const result = await this.#receive(stream, incoming, signal);
    await stream.write(encodeMessage(result), { signal });
    await stream.closeWrite();
  }

  /** Reads the pushed token and offers it; a refusal becomes the answer's error. */
  async #receive(
    stream: RpcFrameStream,
    incoming: RpcIncoming<ControlRequest, { ok: true }>,
    signal: AbortSignal,
  ): Promise<ControlResult> {
    const expected = incoming.head.bytes;
    const token = new Uint8Array(expected);
    let received = 0;
    for (;;) {
      const frame = await stream.read({ signal });
      if (frame === null) break;
      if (received + frame.length > expected) {
        return refusal(
          SwarmErrorCode.MALFORMED_MESSAGE,
          `the token is longer than the ${expected} bytes announced`,
        );
      }
      token.set(frame, received);
      received += frame.length;
    }
    if (received !== expected) {
      return refusal(
        SwarmErrorCode.MALFORMED_MESSAGE,
        `the token is ${received} bytes, ${expected} were announced`,
      );
    }
    let text: string;
    try {
      text = UTF8.decode(token);
    } catch {
      return refusal(SwarmErrorCode.MALFORMED_MESSAGE, "the token is not UTF-8");
    }
    try {
      const { adopted, current } = this.offer(text, incoming.from.peerId);
      return { adopted, version: current.version };
    } catch (error) {
      return refusal(codeOf(error), error instanceof Error ? error.message : String(error));
    }
  }
}

function refusal(code: string, message: string): ControlResult {
  return { error: { code, message: message.slice(0, 1024) } };
}

function codeOf(error: unknown): string {
  return isSwarmError(error) || isProtocolError(error) ? error.code : "INTERNAL";
}
