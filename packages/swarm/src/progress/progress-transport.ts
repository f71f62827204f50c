import { SwarmError, SwarmErrorCode } from "../errors.ts";
import type { PeerIdString, Rpc, RpcIncoming, RpcPeer } from "../rpc/rpc.ts";
import { checkRecordRole, progressMethod, type ProgressRecord } from "./progress-messages.ts";

/** The slice of a pino logger the progress layer uses. */
export interface ProgressLogger {
  debug(fields: object, message: string): void;
  /** Refusals of implausible records; absent: they go to `debug`. */
  warn?(fields: object, message: string): void;
}

/**
 * Takes a record from another peer, already authenticated (`from` is the record's origin with its
 * verified pass); answers what became of it. A gossip transport forwards only records taken.
 */
/**
 * What the tracker made of a record: taken, dropped for the receiver's own limits (rate, table
 * size), or refused for claiming what cannot be true (held against its sender, never forwarded).
 */
export type OfferOutcome = "accepted" | "ignored" | "implausible";

export type ProgressOffer = (from: RpcPeer, record: ProgressRecord) => OfferOutcome;

/** How progress records travel between peers (see ProgressTracker). */
export interface ProgressTransport {
  /** This node's peer id: records never come from it. */
  readonly self: PeerIdString;
  /** Starts receiving: `offer` hears every authenticated record from another peer. */
  start(offer: ProgressOffer): void;
  /** Stops receiving and sending; in-flight sends are aborted. */
  stop(): void;
  /** Sends this node's record to the swarm. Never rejects: failures are logged at debug. */
  publish(record: ProgressRecord): Promise<void>;
}

export interface RpcProgressTransportOptions {
  readonly rpc: Rpc;
  /** The peers currently connected and authorized; each push goes to all of them. */
  readonly peers: () => readonly PeerIdString[];
  /** Time limit of one push. */
  readonly callTimeoutMs: number;
  readonly logger?: ProgressLogger;
}

/**
 * Direct delivery over the signed rpc layer: each record is pushed to every connected member, so
 * a swarm of n handles n² messages per publish round. It needs no relaying and no extra
 * authentication (the rpc layer verifies the sender's pass on every request), which suits small
 * swarms and the in-memory tests; the engine gossips instead (see GossipProgressTransport). A
 * record that does not fit the sender's pass role (`checkRecordRole`) is answered with
 * MALFORMED_MESSAGE and not taken.
 */
export class RpcProgressTransport implements ProgressTransport {
  readonly #options: RpcProgressTransportOptions;
  /** One in-flight push per peer; `again` asks for one more with the latest record when it ends. */
  readonly #sending = new Map<PeerIdString, { again: boolean; done: Promise<void> }>();
  #latest: ProgressRecord | undefined;
  #stopping: AbortController | undefined;

  constructor(options: RpcProgressTransportOptions) {
    this.#options = options;
  }

  get self(): PeerIdString {
    return this.#options.rpc.peerId;
  }

  start(offer: ProgressOffer): void {
    if (this.#stopping !== undefined) return;
    this.#stopping = new AbortController();
    this.#options.rpc.handle(progressMethod, async (incoming: RpcIncoming<ProgressRecord, { ok: true }>) => {
      if (incoming.from.peerId !== this.self) {
        // A record that does not fit the sender's pass is refused with the reason, before the tracker.
        checkRecordRole(incoming.head, incoming.from.pass.role);
        if (offer(incoming.from, incoming.head) === "implausible") {
          throw new SwarmError(
            SwarmErrorCode.MALFORMED_MESSAGE,
            "an implausible progress record was refused",
          );
        }
      }
      await incoming.respond({ ok: true });
    });
  }

  stop(): void {
    if (this.#stopping === undefined) return;
    this.#options.rpc.unhandle(progressMethod);
    this.#stopping.abort(new SwarmError(SwarmErrorCode.ABORTED, "progress tracker stopped"));
    this.#stopping = undefined;
  }

  /**
   * Pushes `record` to every connected peer in parallel and resolves when all pushes are done. A
   * peer with a push in flight gets one more push with the latest record right after it, never two
   * at once.
   */
  async publish(record: ProgressRecord): Promise<void> {
    this.#latest = record;
    let connected: readonly PeerIdString[];
    try {
      connected = this.#options.peers();
    } catch (error) {
      this.#options.logger?.debug({ err: error }, "listing peers for a progress push failed");
      return;
    }
    const targets = [...new Set(connected)].filter((peer) => peer !== this.self);
    await Promise.all(targets.map((peer) => this.#pushTo(peer)));
  }

  #pushTo(peer: PeerIdString): Promise<void> {
    const inFlight = this.#sending.get(peer);
    if (inFlight !== undefined) {
      inFlight.again = true;
      return inFlight.done;
    }
    const state = { again: true, done: Promise.resolve() };
    state.done = (async () => {
      try {
        while (state.again && this.#stopping?.signal.aborted === false) {
          state.again = false;
          await this.#send(peer);
        }
      } finally {
        this.#sending.delete(peer);
      }
    })();
    this.#sending.set(peer, state);
    return state.done;
  }

  async #send(peer: PeerIdString): Promise<void> {
    const record = this.#latest;
    if (record === undefined) return;
    try {
      await this.#options.rpc.request(peer, progressMethod, record, {
        timeoutMs: this.#options.callTimeoutMs,
        signal: this.#stopping?.signal,
      });
    } catch (error) {
      this.#options.logger?.debug({ peer, err: error }, "progress push failed");
    }
  }
}
