import type { Connection, Startable, Stream, StreamHandler } from "@libp2p/interface";
import type { Registrar } from "@libp2p/interface-internal";
import type { Logger } from "pino";
import type { PeerAuthorizer } from "./peer-authorizer.ts";

export interface PassGateInit {
  authorizer: PeerAuthorizer;
  /** Protocols that authenticate every request themselves (the swarm's signed RPCs). */
  isSelfAuthenticated: (protocol: string) => boolean;
  /** How long an incoming stream may wait for its peer's pass; default 10 s. */
  waitMs?: number;
  logger: Logger;
}

/**
 * A libp2p service that puts the pass check in front of libp2p's own protocols (identify, ping,
 * gossipsub, the relay's hop/stop, DCUtR, AutoNAT). After every service has registered its handler,
 * each one is replaced by a wrapper that first waits until the remote peer has shown a valid pass
 * (the hello exchange), and aborts the stream otherwise. The swarm's own RPCs verify a signed
 * request on every stream, so they are not wrapped.
 *
 * (libp2p's stream middleware would be the natural hook, but in libp2p 3.3 it appends the handler
 * to the stored middleware array on every inbound stream, so handlers pile up; wrapping avoids it.)
 */
export class PassGateService implements Startable {
  readonly #registrar: Registrar;
  readonly #init: PassGateInit;
  readonly #wrapped = new Set<string>();

  constructor(components: { registrar: Registrar }, init: PassGateInit) {
    this.#registrar = components.registrar;
    this.#init = init;
  }

  readonly [Symbol.toStringTag] = "@barnraise/pass-gate";

  start(): void {}

  async afterStart(): Promise<void> {
    await this.wrapAll();
  }

  stop(): void {}

  /** Wraps every handler registered so far; call again after a service registers a late one. */
  async wrapAll(): Promise<void> {
    for (const protocol of this.#registrar.getProtocols()) {
      if (this.#wrapped.has(protocol) || this.#init.isSelfAuthenticated(protocol)) continue;
      const record = this.#registrar.getHandler(protocol);
      const inner = record.handler;
      const waitMs = this.#init.waitMs ?? 10_000;
      const gated: StreamHandler = async (stream: Stream, connection: Connection) => {
        const peer = connection.remotePeer.toString();
        if (!(await this.#init.authorizer.waitFor(peer, waitMs))) {
          this.#init.logger.debug({ peer, protocol }, "refused a stream from a peer without a valid pass");
          stream.abort(new Error("no valid access pass for this experiment"));
          return;
        }
        await inner(stream, connection);
      };
      await this.#registrar.handle(protocol, gated, { ...record.options, force: true });
      this.#wrapped.add(protocol);
    }
  }
}

export function passGate(init: PassGateInit): (components: { registrar: Registrar }) => PassGateService {
  return (components) => new PassGateService(components, init);
}
