import { noise } from "@chainsafe/libp2p-noise";
import { yamux } from "@chainsafe/libp2p-yamux";
import { autoNAT } from "@libp2p/autonat";
import { circuitRelayServer, circuitRelayTransport } from "@libp2p/circuit-relay-v2";
import { dcutr } from "@libp2p/dcutr";
import { identify } from "@libp2p/identify";
import type { Libp2p } from "@libp2p/interface";
import type { TransportManager } from "@libp2p/interface-internal";
import { gossipsub, StrictSign, type GossipSub } from "@libp2p/gossipsub";
import { createTopicScoreParams } from "@libp2p/gossipsub/score";
import { ping } from "@libp2p/ping";
import { tcp } from "@libp2p/tcp";
import { webSockets } from "@libp2p/websockets";
import { libp2pPrivateKey, toBase64Url } from "@barnraise/protocol";
import { createLibp2p } from "libp2p";
import { progressTopic } from "../progress/progress-gossip.ts";
import { passGate, type PassGateService } from "./pass-gate-service.ts";
import type { PeerAuthorizer } from "./peer-authorizer.ts";
import type { SwarmNodeOptions } from "./swarm-node-options.ts";

/** A swarm member's libp2p node: the pass gate and gossipsub are the services the node uses. */
export type SwarmLibp2p = Libp2p<{ passGate: PassGateService; pubsub: GossipSub }>;

/** What the node gives its libp2p besides its options. */
export interface SwarmLibp2pParts {
  /** Admits and gates peers by their passes (the connection gater and the pass gate). */
  readonly authorizer: PeerAuthorizer;
  /** How long a new connection has to show a valid pass. */
  readonly helloTimeoutMs: number;
  /** Whether a protocol authenticates its own streams (the signed RPC's): the pass gate lets it by. */
  readonly isSelfAuthenticated: (protocol: string) => boolean;
  /** Told of libp2p's transport manager, with which relay reservations are made when needed. */
  readonly onTransportManager: (manager: TransportManager) => void;
}

/**
 * The libp2p 3 node of a swarm member, not started: TCP and WebSockets (and circuit relay v2),
 * Noise, Yamux, identify, ping, gossipsub for the progress records, DCUtR and AutoNAT, a relay
 * server on an aux peer, and the pass gate in front of every protocol.
 */
export function createSwarmLibp2p(options: SwarmNodeOptions, parts: SwarmLibp2pParts): Promise<SwarmLibp2p> {
  const { authorizer, helloTimeoutMs } = parts;
  const isAux = options.mode === "aux";
  const topic = progressTopic(options.experimentId);
  const listen = options.listen ?? (options.mode === "client" ? [] : ["/ip4/0.0.0.0/tcp/0"]);
  return createLibp2p({
    privateKey: libp2pPrivateKey(options.identity),
    start: false,
    addresses: {
      // Relay reservations are made later, on a connected aux peer, when they are needed (see
      // #reserveRelay). A bare "/p2p-circuit" would start libp2p 3.3's relay discovery, whose
      // random walk spins without yielding in a swarm of a few peers.
      listen,
      ...(options.announce === undefined ? {} : { announce: options.announce }),
    },
    transports: [...(options.transports ?? [tcp(), webSockets()]), circuitRelayTransport()],
    connectionEncrypters: [noise()],
    streamMuxers: [yamux()],
    connectionGater: authorizer.gater(helloTimeoutMs),
    // A link saturated by an all-reduce delays pings for seconds; that must not tear down the
    // connection carrying the round. Dead peers still show up as failed streams and timeouts.
    connectionMonitor: { abortConnectionOnPingFailure: false },
    connectionManager: {
      maxConnections: Math.max(64, (options.maxPeers ?? 64) * 2),
      // Peers behind one NAT (or a test swarm on loopback) share an address; libp2p's default of
      // 5 inbound connections per second per address would refuse a burst of joiners.
      inboundConnectionThreshold: 100,
      maxIncomingPendingConnections: 64,
    },
    services: {
      identify: identify({ protocolPrefix: `/barnraise/${options.experimentId}` }),
      ping: ping(),
      // Progress records (see GossipProgressTransport): every message signed by its origin, one
      // topic, no fallback to floodsub, and messages refused by the topic validator count
      // against the peer that sent them.
      pubsub: gossipsub({
        globalSignaturePolicy: StrictSign,
        allowedTopics: [topic],
        fallbackToFloodsub: false,
        // A peer sends its own record to its mesh only, not to every member.
        floodPublish: false,
        allowPublishToZeroTopicPeers: true,
        emitSelf: false,
        doPX: false,
        // Each record reaches a peer along several mesh paths. Without a fast id, gossipsub
        // checks every copy's signature before it finds the copy is a duplicate; with one, only
        // the first copy (origin and sequence number, which StrictSign's message id is made of
        // too) is verified. Ids enter this cache only after their signature checked out.
        fastMsgIdFn: fastMessageId,
        ...(options.pubsubMetrics === undefined
          ? {}
          : {
              metricsRegister: options.pubsubMetrics,
              metricsTopicStrToLabel: new Map([[topic, "progress"]]),
            }),
        scoreParams: {
          // Members are admitted by pass, and peers behind one NAT (or on one host) share an
          // address: that alone must not cost them their score.
          IPColocationFactorWeight: 0,
          topics: {
            [topic]: createTopicScoreParams({
              topicWeight: 1,
              invalidMessageDeliveriesWeight: -100,
              invalidMessageDeliveriesDecay: 0.5,
              // A record every few seconds per peer is far below any delivery quota a mesh
              // peer could be held to.
              meshMessageDeliveriesWeight: 0,
              meshFailurePenaltyWeight: 0,
            }),
          },
        },
      }),
      dcutr: dcutr(),
      autoNAT: autoNAT({ protocolPrefix: `/barnraise/${options.experimentId}` }),
      ...(isAux
        ? {
            relay: circuitRelayServer({
              reservations: { applyDefaultLimit: false, maxReservations: 1024 },
            }),
          }
        : {}),
      // Not a protocol: keeps the transport manager, to make relay reservations when they are needed.
      transports: (components: { transportManager: TransportManager }) => {
        parts.onTransportManager(components.transportManager);
        return {};
      },
      passGate: passGate({
        authorizer,
        isSelfAuthenticated: parts.isSelfAuthenticated,
        waitMs: helloTimeoutMs,
        logger: options.logger,
      }),
    },
  });
}

/** The origin's peer id and the message's sequence number (StrictSign messages carry both). */
function fastMessageId(message: { from?: Uint8Array; seqno?: Uint8Array }): string {
  const from = message.from === undefined ? "" : toBase64Url(message.from);
  const seqno = message.seqno === undefined ? "" : toBase64Url(message.seqno);
  return `${from}/${seqno}`;
}
