import type { MetricsRegister } from "@libp2p/gossipsub/metrics";
import type { KeyPair } from "@barnraise/protocol";
import type { Libp2pOptions } from "libp2p";
import type { Logger } from "pino";
import type { AuthorityKeys } from "../platform/authority-keys.ts";
import type { AveragingMode } from "./hello.ts";
import type { TrafficCaps } from "../rpc/traffic-caps.ts";

/**
 * How other members reach this node. `unknown`: not checked yet (no aux peer to ask), it announces
 * every address it has. `direct`: an aux peer dialed it back, it announces its direct addresses.
 * `relayed`: it cannot be dialed (behind NAT, or `--client`), so it holds a slot on an aux peer's
 * circuit relay and announces only that address; it sends and receives in rounds but does not
 * reduce a part or lead matchmaking, so all-reduce traffic never goes through the relay.
 */
export type ReachabilityState = "unknown" | "direct" | "relayed";

/** libp2p transports (`tcp()`, `webSockets()`, …), as a runtime has them. */
export type SwarmTransports = NonNullable<Libp2pOptions["transports"]>;

/** How a node is connected to its members, for the volunteer's status line and logs. */
export interface Connectivity {
  /** This node's averaging mode now (a node found unreachable runs on as a client). */
  readonly mode: AveragingMode;
  readonly reachability: ReachabilityState;
  /** Connected members by path: a direct connection from the start, one through an aux peer's
   * relay, and one that began relayed and was upgraded to a direct one (DCUtR hole punching). */
  readonly direct: number;
  readonly relayed: number;
  readonly upgraded: number;
  /** Of the members reached directly, those over WebRTC (a browser's path to full nodes); absent when none. */
  readonly webrtc?: number;
}

export interface SwarmNodeOptions {
  experimentId: string;
  identity: KeyPair;
  /** The experiment's authority: passes are checked against the keys it trusts, following its rotations. */
  authority: AuthorityKeys;
  /** The pass from the join response, and how to get a new one before it expires. */
  pass: string;
  refreshPass: () => Promise<string>;
  /**
   * node: accepts connections, reduces a part of each all-reduce. client: behind NAT, dials out
   * only (reachable through relays). aux: a public helper — relay server, reducer with weight 0.
   */
  mode: AveragingMode;
  /**
   * The transports the node dials and listens on, besides circuit relay v2 (which every node has):
   * default TCP and WebSockets, what Node.js has. A browser has WebSockets (and WebRTC), not TCP.
   */
  transports?: SwarmTransports;
  /** Listen multiaddrs; default TCP on all interfaces with a free port (none in client mode). */
  listen?: string[];
  /** Addresses to announce instead of the listen addresses (e.g. a public IP behind port forwarding). */
  announce?: string[];
  /** Multiaddrs (with /p2p/<id>) of peers to join through: the join response's initial peers. */
  bootstrap?: string[];
  /**
   * Hold relay slots on the bootstrap peers even when reachable directly: for private networks
   * where the aux peers reach every node but the nodes cannot reach each other. The bootstrap peers
   * must be relays (aux peers). Nodes that are not reachable hold one anyway. Default: hold one
   * when the node listens on no secure WebSockets address, so that browser tabs (which dial nothing
   * else, and from an HTTPS page nothing insecure) reach it through the aux's relay.
   */
  listenViaRelays?: boolean;
  /** Whether to ask an aux peer to dial back at start (default true; aux peers never ask). */
  checkReachability?: boolean;
  logger: Logger;
  now?: () => number;
  /** How long a new connection has to show a valid pass; default 10 s. */
  helloTimeoutMs?: number;
  /** Allowed |time − now| of signed requests; default 30 s. */
  maxSkewMs?: number;
  /** Stop dialing members beyond this many connections; default 64. */
  maxPeers?: number;
  /** Where gossipsub counts its traffic (messages, bytes, control), for benches and monitoring. */
  pubsubMetrics?: MetricsRegister;
  /**
   * The volunteer's caps on this node's traffic: all its rpc streams (all-reduce, state sharing,
   * speed tests) share them. Default: none.
   */
  caps?: TrafficCaps;
}
