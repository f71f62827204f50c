import { tcp } from "@libp2p/tcp";
import { webSockets } from "@libp2p/websockets";
import type { SwarmTransports } from "../p2p/swarm-node-options.ts";
import { listenOnly } from "./listen-only.ts";

/** What a Node.js node dials and listens on, and where a full node listens when told nothing. */
export interface NodeTransports {
  readonly transports: SwarmTransports;
  /** TCP, and WebRTC-direct where it loaded: all interfaces, free ports. */
  readonly defaultListen: readonly string[];
  /** Why this node has no WebRTC-direct (browser tabs then reach it through the aux's relay). */
  readonly withoutWebRtc?: string;
}

const TCP_LISTEN = "/ip4/0.0.0.0/tcp/0";
const WEBRTC_DIRECT_LISTEN = "/ip4/0.0.0.0/udp/0/webrtc-direct";

/**
 * TCP and WebSockets, and a listen-only WebRTC-direct for browser tabs (from any page, HTTPS ones
 * included, a tab reaches a full node that way without a certificate and without the aux's relay).
 * WebRTC in Node.js is a native add-on (node-datachannel), loaded here when the node starts: where
 * it is missing (a program bundle that does not carry it, a platform it has no build for), the node
 * runs on without it and says why in `withoutWebRtc`.
 */
export async function loadNodeTransports(): Promise<NodeTransports> {
  try {
    const { webRTCDirect } = await import("@libp2p/webrtc");
    return {
      transports: [tcp(), webSockets(), listenOnly(webRTCDirect())],
      defaultListen: [TCP_LISTEN, WEBRTC_DIRECT_LISTEN],
    };
  } catch (error) {
    return {
      transports: [tcp(), webSockets()],
      defaultListen: [TCP_LISTEN],
      withoutWebRtc: error instanceof Error ? error.message : String(error),
    };
  }
}

/**
 * The addresses of `listen` these transports can listen on, and the WebRTC-direct ones they cannot
 * (a node without WebRTC told to listen there, by its defaults or by hand).
 */
export function listenable(
  transports: NodeTransports,
  listen: readonly string[],
): { readonly usable: string[]; readonly dropped: string[] } {
  const webRtc = transports.withoutWebRtc === undefined;
  const dropped = webRtc ? [] : listen.filter((address) => address.includes("/webrtc-direct"));
  return { usable: listen.filter((address) => !dropped.includes(address)), dropped };
}
