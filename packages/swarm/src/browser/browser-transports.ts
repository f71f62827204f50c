import { webSockets } from "@libp2p/websockets";
import type { SwarmTransports } from "../p2p/swarm-node-options.ts";

/**
 * The libp2p transports a web page or worker has: WebSockets (a page cannot dial TCP), besides the
 * circuit relay every node gets, through which a tab reaches the members that only listen on TCP.
 * Over an https page only wss:// is dialed (the browser refuses ws:// there as mixed content).
 */
export function browserTransports(): SwarmTransports {
  return [webSockets()];
}
