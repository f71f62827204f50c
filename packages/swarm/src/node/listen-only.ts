import type { Transport } from "@libp2p/interface";
import type { Multiaddr } from "@multiformats/multiaddr";

/**
 * A transport that listens but never dials: a Node.js node answers browsers over WebRTC-direct
 * (their only way in from an HTTPS page besides secure WebSockets) while it keeps reaching other
 * nodes over TCP, whose throughput on a home link WebRTC's SCTP does not match.
 */
export function listenOnly<T>(factory: (components: T) => Transport): (components: T) => Transport {
  return (components) => {
    const transport = factory(components);
    return new Proxy(transport, {
      get(target, property) {
        if (property === "dialFilter") return (_addresses: Multiaddr[]): Multiaddr[] => [];
        const value: unknown = Reflect.get(target, property, target);
        return typeof value === "function" ? (value as (...args: unknown[]) => unknown).bind(target) : value;
      },
    });
  };
}
