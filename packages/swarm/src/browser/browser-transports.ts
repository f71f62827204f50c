import { webRTCDirect } from "@libp2p/webrtc";
import { webSockets } from "@libp2p/websockets";
import type { SwarmTransports } from "../p2p/swarm-node-options.ts";

/**
 * The libp2p transports a web page or worker has, besides the circuit relay every node gets:
 * WebSockets (a page cannot dial TCP; over an https page only wss:// is dialed, the browser
 * refuses ws:// there as mixed content), and WebRTC-direct to the full nodes that listen on it
 * (they do by default), which needs no certificate on their side and works from any page. A worker
 * has WebRTC only through its page (`installWorkerRtc`, `hostWorkerRtc`): call this after that.
 * What neither reaches, the aux's relay does.
 */
export function browserTransports(): SwarmTransports {
  const webRtc = typeof (globalThis as { RTCPeerConnection?: unknown }).RTCPeerConnection === "function";
  return [webSockets(), ...(webRtc ? [webRTCDirect()] : [])];
}
