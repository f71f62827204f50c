import { noise } from "@chainsafe/libp2p-noise";
import { yamux } from "@chainsafe/libp2p-yamux";
import { autoNAT } from "@libp2p/autonat";
import { circuitRelayServer, circuitRelayTransport } from "@libp2p/circuit-relay-v2";
import { dcutr } from "@libp2p/dcutr";
import { identify } from "@libp2p/identify";
import type { Connection, Libp2p, PeerId } from "@libp2p/interface";
import type { TransportManager } from "@libp2p/interface-internal";
import { gossipsub, StrictSign, type GossipSub } from "@libp2p/gossipsub";
import type { MetricsRegister } from "@libp2p/gossipsub/metrics";
import { createTopicScoreParams } from "@libp2p/gossipsub/score";
import { peerIdFromString } from "@libp2p/peer-id";
import { ping } from "@libp2p/ping";
import { tcp } from "@libp2p/tcp";
import { webSockets } from "@libp2p/websockets";
import { multiaddr } from "@multiformats/multiaddr";
import {
  type AccessPassVerifier,
  isProtocolError,
  libp2pPrivateKey,
  MemoryNonceStore,
  ProtocolErrorCode,
  ReplayGuard,
  RequestVerifier,
  type KeyPair,
  toBase64Url,
  type RevocationList,
} from "@barnraise/protocol";
import { runtimeCrypto } from "@barnraise/protocol/runtime-crypto";
import { createLibp2p } from "libp2p";
import type { Logger } from "pino";
import { isSwarmError, SwarmError, SwarmErrorCode } from "../errors.ts";
import { checkReachability, DialBackServer, tcpPorts, type Reachability } from "../net/reachability.ts";
import { stallAwareSignal } from "../time/stall-aware-timeout.ts";
import type { AuthorityKeys } from "../platform/authority-keys.ts";
import { isCredentialRefusal, Libp2pRpc, protocolId } from "../rpc/libp2p-rpc.ts";
import { progressTopic } from "../progress/progress-gossip.ts";
import { checkModeFitsRole, HELLO_MAX_PEERS, helloMethod, type AveragingMode } from "./hello.ts";
import { PassHolder } from "./pass-holder.ts";
import { PeerAuthorizer } from "./peer-authorizer.ts";
import { passGate, type PassGateService } from "./pass-gate-service.ts";
import { RefusalLog } from "./refusal-log.ts";
import { unrefTimer } from "../time/unref-timer.ts";

export type { RevocationList } from "@barnraise/protocol";

/**
 * A peer whose pass was refused (revoked, expired, signed by a key this node does not trust yet) is
 * gated this briefly: that pass is refused at every hello anyway, and the same machine may come
 * back at once with a good one (a new token's, a refreshed one, one of a rotated key).
 */
const REFUSED_DENY_MS = 5_000;
/**
 * A pass signed by a key this node does not trust is gated this long, or until the node follows a
 * rotation of the authority key (then at once, see PeerAuthorizer.forgiveKeyDenials).
 */
const UNTRUSTED_KEY_DENY_MS = 60_000;
/** Refusals of a pass the authority did sign, for the key it names (see onRefusedPeer). */
const OWN_PASS_REFUSALS: ReadonlySet<string> = new Set([
  ProtocolErrorCode.PASS_REVOKED,
  ProtocolErrorCode.PASS_EXPIRED,
  ProtocolErrorCode.PASS_NOT_YET_VALID,
  ProtocolErrorCode.PASS_WRONG_ROLE,
  ProtocolErrorCode.PASS_KEY_ROTATED,
]);
/** A node whose pass peers call outdated (PASS_KEY_ROTATED) fetches a new one at most this often. */
const STALE_PASS_REFRESH_MS = 30_000;
/** How often a node asks a random member for the member list. */
const MEMBER_REFRESH_MS = 5_000;
/**
 * A refresh that brings no member this node did not know doubles the wait before the next, up to
 * this. Newcomers dial the members they learn of, so a meshed swarm hears of them anyway; the
 * refresh only repairs what those dials missed, and at 64 members each answer is a few KB.
 */
const MAX_MEMBER_REFRESH_MS = 60_000;
/** Even with nothing new, maintenance walks the peer store for members to redial this often. */
const PEER_STORE_SCAN_MS = 30_000;
/** After a failed dial of a member, wait this long, doubling per failure up to the maximum. */
const FIRST_DIAL_BACKOFF_MS = 5_000;
const MAX_DIAL_BACKOFF_MS = 5 * 60_000;
/** While no aux peer could say whether this node is reachable, ask again this often. */
const REACHABILITY_RETRY_MS = 30_000;
/** After a failed relay reservation, wait this long, doubling up to a minute. */
const FIRST_RESERVE_BACKOFF_MS = 5_000;
const MAX_RESERVE_BACKOFF_MS = 60_000;

/**
 * How other members reach this node. `unknown`: not checked yet (no aux peer to ask), it announces
 * every address it has. `direct`: an aux peer dialed it back, it announces its direct addresses.
 * `relayed`: it cannot be dialed (behind NAT, or `--client`), so it holds a slot on an aux peer's
 * circuit relay and announces only that address; it sends and receives in rounds but does not
 * reduce a part or lead matchmaking, so all-reduce traffic never goes through the relay.
 */
export type ReachabilityState = "unknown" | "direct" | "relayed";

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
  /** Listen multiaddrs; default TCP on all interfaces with a free port (none in client mode). */
  listen?: string[];
  /** Addresses to announce instead of the listen addresses (e.g. a public IP behind port forwarding). */
  announce?: string[];
  /** Multiaddrs (with /p2p/<id>) of peers to join through: the join response's initial peers. */
  bootstrap?: string[];
  /**
   * Hold relay slots on the bootstrap peers even when reachable directly: for private networks
   * where the aux peers reach every node but the nodes cannot reach each other. The bootstrap peers
   * must be relays (aux peers). Nodes that are not reachable hold one anyway.
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
}

/**
 * One member of an experiment's private swarm: a libp2p 3 node (TCP + WebSockets, Noise, Yamux,
 * identify, ping, gossipsub, circuit relay v2, DCUtR, AutoNAT) whose identity is the access-pass
 * key, plus the signed RPC layer and the pass gate. Peers without a valid pass are refused at every
 * layer: their streams to libp2p's protocols (gossipsub's included) wait for a pass and are
 * aborted, their RPCs fail verification, and after a failed hello they are disconnected and gated
 * for a while.
 *
 * No Kademlia DHT. Members find each other through the bootstrap peers and the hello exchange
 * (each hello answer lists up to HELLO_MAX_PEERS members, and maintenance asks a random member
 * every few seconds), which meshes a swarm of up to `maxPeers` (64) fully; group keys are
 * matched by the leaders over the rpc layer, and progress spreads by gossip. A DHT would add its
 * periodic routing-table refreshes and random walks to every member's traffic and find nothing
 * those do not, so the node runs none.
 */
export class SwarmNode {
  readonly libp2p: Libp2p<{ passGate: PassGateService; pubsub: GossipSub }>;
  readonly rpc: Libp2pRpc;
  readonly authorizer: PeerAuthorizer;
  readonly passHolder: PassHolder;
  /** Peers whose pass this node refused lately, with why (an aux reports them to the platform). */
  readonly refusedPeers: RefusalLog;
  /** Peers that refused this node's pass lately, with why (the volunteer's status line says so). */
  readonly refusedBy: RefusalLog;
  readonly #passes: AccessPassVerifier;
  readonly #transports: { manager?: TransportManager };
  readonly #dialBack: DialBackServer;
  #mode: AveragingMode;
  #reachability: ReachabilityState = "unknown";
  /** The address an aux peer reached this node at (direct), or why none could (relayed). */
  #reachedAt: string | undefined;
  #reachabilityCheckedAt = -Infinity;
  /** Until the first check at start is done, a node announces no address that may be unusable. */
  #firstCheckPending: boolean;
  #reachabilityInFlight: Promise<Reachability | undefined> | undefined;
  #reserving = false;
  #reserveBackoff = { nextAt: 0, delayMs: FIRST_RESERVE_BACKOFF_MS / 2 };
  readonly #options: SwarmNodeOptions;
  readonly #logger: Logger;
  readonly #helloInFlight = new Map<string, Promise<boolean>>();
  readonly #modes = new Map<string, AveragingMode>();
  /** Members other peers told us about in hello answers; maintenance dials them. */
  readonly #introduced = new Set<string>();
  /** The addresses each member announced in its hello (relayed ones included). */
  readonly #announced = new Map<string, string[]>();
  readonly #greetedListeners = new Set<(peer: string) => void>();
  /** The path last logged per member (direct or relayed), so a change of path is logged once. */
  readonly #paths = new Map<string, "direct" | "relayed">();
  /** Members whose relayed connection became a direct one (hole punched). */
  readonly #upgraded = new Set<string>();
  /** Members whose last dial failed: when to try again, and how long the wait was. */
  readonly #dialBackoff = new Map<string, { nextAt: number; delayMs: number; failures: number }>();
  #maintenance: NodeJS.Timeout | undefined;
  #lastRefresh = 0;
  #refreshWaitMs = MEMBER_REFRESH_MS;
  /** The addresses last merged into the peer store per member, so unchanged ones are not merged again. */
  readonly #merged = new Map<string, string>();
  /** Whether a connection closed or addresses were learned since maintenance last walked the peer store. */
  #peerStoreChanged = true;
  #lastPeerStoreScan = 0;
  /** When the earliest member waiting out a dial backoff may be dialed again. */
  #redialAt = Infinity;
  #running = false;
  /** Stops following the authority's rotations (see #followedRotation). */
  readonly #unfollow: () => void;

  private constructor(
    libp2p: Libp2p<{ passGate: PassGateService; pubsub: GossipSub }>,
    rpc: Libp2pRpc,
    authorizer: PeerAuthorizer,
    passHolder: PassHolder,
    passes: AccessPassVerifier,
    options: SwarmNodeOptions,
    transports: { manager?: TransportManager },
    refusals: { refusedPeers: RefusalLog; refusedBy: RefusalLog },
  ) {
    this.libp2p = libp2p;
    this.rpc = rpc;
    this.authorizer = authorizer;
    this.passHolder = passHolder;
    this.refusedPeers = refusals.refusedPeers;
    this.refusedBy = refusals.refusedBy;
    this.#passes = passes;
    this.#mode = options.mode;
    this.#options = options;
    this.#logger = options.logger;
    this.#transports = transports;
    this.#dialBack = new DialBackServer({
      rpc,
      dialFresh: async (address, signal) => {
        const connection = await libp2p.dial(multiaddr(address), { force: true, signal });
        await connection.close().catch(() => undefined);
      },
    });
    if (options.mode === "client") this.#reachability = "relayed";
    this.#firstCheckPending = options.mode === "node" && options.checkReachability !== false;
    this.#unfollow = options.authority.onRotation(() => {
      this.#followedRotation();
    });
  }

  /**
   * node: accepts connections and reduces; client: cannot be dialed directly (it said `--client`,
   * or an aux peer could not dial it back), so it only sends and receives; aux: a public helper.
   */
  get mode(): AveragingMode {
    return this.#mode;
  }

  /** How other members reach this node (see ReachabilityState). */
  get reachability(): ReachabilityState {
    return this.#reachability;
  }

  static async create(options: SwarmNodeOptions): Promise<SwarmNode> {
    const now = options.now ?? Date.now;
    const maxSkewMs = options.maxSkewMs ?? 30_000;
    const helloTimeoutMs = options.helloTimeoutMs ?? 10_000;
    const passes = options.authority.passVerifier({ maxSkewMs });
    const passHolder = new PassHolder({
      initial: options.pass,
      passes,
      refresh: options.refreshPass,
      logger: options.logger,
      now,
    });
    const authorizer = new PeerAuthorizer({ now });
    const staleRefresh = { at: -Infinity };
    const isAux = options.mode === "aux";
    const topic = progressTopic(options.experimentId);
    const rpcRef: { current?: Libp2pRpc } = {};
    const transports: { manager?: TransportManager } = {};
    const listen = options.listen ?? (options.mode === "client" ? [] : ["/ip4/0.0.0.0/tcp/0"]);
    const libp2p = await createLibp2p({
      privateKey: libp2pPrivateKey(options.identity),
      start: false,
      addresses: {
        // Relay reservations are made later, on a connected aux peer, when they are needed (see
        // #reserveRelay). A bare "/p2p-circuit" would start libp2p 3.3's relay discovery, whose
        // random walk spins without yielding in a swarm of a few peers.
        listen,
        ...(options.announce === undefined ? {} : { announce: options.announce }),
      },
      transports: [tcp(), webSockets(), circuitRelayTransport()],
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
          transports.manager = components.transportManager;
          return {};
        },
        passGate: passGate({
          authorizer,
          isSelfAuthenticated: (protocol) => rpcRef.current?.serves(protocol) ?? false,
          waitMs: helloTimeoutMs,
          logger: options.logger,
        }),
      },
    });
    const rpc = new Libp2pRpc({
      node: libp2p,
      experimentId: options.experimentId,
      identity: options.identity,
      crypto: runtimeCrypto,
      passes,
      requests: new RequestVerifier({
        crypto: runtimeCrypto,
        passes,
        recipientPublicKey: options.identity.publicKey,
        replayGuard: new ReplayGuard({ store: new MemoryNonceStore(), maxSkewMs }),
      }),
      currentPass: () => passHolder.token(),
      onVerifiedPeer: (peer, pass) => {
        authorizer.admit(peer, pass);
        refusals.refusedPeers.forget(peer);
        refusals.refusedBy.forget(peer);
      },
      onRefusedPeer: (peer, code, reason, ownPass) => {
        // A pass signed by a key this node does not trust: a forgery, or a key the authority rotated
        // to that this node has not heard of yet (it asks every 5 s); gated, and let in at once when
        // it follows that rotation. Nothing to report: it says nothing of a node's standing.
        if (code === ProtocolErrorCode.PASS_BAD_SIGNATURE) {
          authorizer.denyForKey(peer, reason, UNTRUSTED_KEY_DENY_MS);
          return;
        }
        // A genuine pass of the peer's own that no longer holds (revoked, expired, of a replaced
        // key …): remembered with why (an aux reports it), and gated briefly, since the same
        // machine may come back at once with a good one. Anything else (another's pass, a request
        // not signed by the pass's key) is an attempt, gated for the usual while.
        if (!ownPass || !OWN_PASS_REFUSALS.has(code)) {
          authorizer.deny(peer, reason);
          return;
        }
        refusals.refusedPeers.record(peer, code, reason);
        authorizer.deny(peer, reason, REFUSED_DENY_MS);
      },
      onRefusedBy: (peer, code, reason) => {
        refusals.refusedBy.record(peer, code, reason);
        // The peer knows our pass's key was replaced: a refresh (a join) brings the rotation and a new pass.
        if (code === ProtocolErrorCode.PASS_KEY_ROTATED && now() - staleRefresh.at >= STALE_PASS_REFRESH_MS) {
          staleRefresh.at = now();
          passHolder.refreshNow().catch((error: unknown) => {
            options.logger.warn(
              { err: error },
              "could not fetch a pass of the experiment's new authority key",
            );
          });
        }
      },
      logger: options.logger,
      now,
    });
    rpcRef.current = rpc;
    const refusals = { refusedPeers: new RefusalLog({ now }), refusedBy: new RefusalLog({ now }) };
    return new SwarmNode(libp2p, rpc, authorizer, passHolder, passes, options, transports, refusals);
  }

  get peerId(): string {
    return this.libp2p.peerId.toString();
  }

  /** The experiment's authority as this node knows it (it follows key rotations). */
  get authority(): AuthorityKeys {
    return this.#options.authority;
  }

  /** This node's pass verifier, with the organizer's revocation list applied. */
  get passes(): AccessPassVerifier {
    return this.#passes;
  }

  /** The addresses other peers can dial, each ending with /p2p/<this peer>. */
  multiaddrs(): string[] {
    return this.libp2p.getMultiaddrs().map((address) => address.toString());
  }

  /** Connected peers that have shown a valid pass. */
  members(): string[] {
    const connected = new Set(this.libp2p.getPeers().map((peer) => peer.toString()));
    return this.authorizer.admittedPeers().filter((peer) => connected.has(peer));
  }

  async start(): Promise<void> {
    if (this.#mode === "aux") this.#dialBack.start();
    this.rpc.handle(helloMethod, async (incoming) => {
      try {
        checkModeFitsRole(incoming.head.mode, incoming.from.pass.role, "a hello");
      } catch (error) {
        // A valid pass greeting in a mode not its own: an attempt, gated like another's pass.
        this.#refuseMode(incoming.from.peerId, error);
        throw error;
      }
      this.#modes.set(incoming.from.peerId, incoming.head.mode);
      this.#announced.set(incoming.from.peerId, incoming.head.addrs);
      await incoming.respond({
        mode: this.#mode,
        addrs: this.#ownAddrs(),
        peers: this.#knownPeers(incoming.from.peerId),
      });
      await this.#learnAddrs(incoming.from.peerId, incoming.head.addrs);
      this.#greeted(incoming.from.peerId);
    });
    this.libp2p.addEventListener("connection:open", (event) => {
      this.#onConnection(event.detail);
    });
    this.libp2p.addEventListener("peer:disconnect", (event) => {
      this.#peerStoreChanged = true;
      // Whoever connects next under that PeerId may be another process (an aux restarted with its
      // identity): it knows nothing of this node, so the next connection says hello again.
      this.#modes.delete(event.detail.toString());
    });
    // Running before libp2p starts: relay reservations are dialed inside start(), and the relay
    // lets them through only after our hello.
    this.#running = true;
    try {
      await this.libp2p.start();
    } catch (error) {
      this.#running = false;
      throw error;
    }
    // Handlers registered after start (the relay's, the hello's) get the gate too.
    await this.libp2p.services.passGate.wrapAll();
    this.passHolder.start();
    await this.#bootstrap();
    if (this.#mode !== "aux") {
      if (this.#reachability === "relayed" || this.#options.listenViaRelays === true)
        await this.#reserveRelay();
      if (this.#mode === "node" && this.#options.checkReachability !== false) {
        await this.checkReachability().catch((error: unknown) => {
          this.#logger.warn({ err: error }, "could not check whether this node is reachable; will try again");
        });
        if (this.#firstCheckPending) {
          this.#firstCheckPending = false;
          if (this.#reachability === "unknown") await this.#announce();
        }
      }
    }
    this.#maintenance = setInterval(() => void this.#maintain(), 2_000);
    unrefTimer(this.#maintenance);
  }

  async stop(): Promise<void> {
    this.#running = false;
    this.#unfollow();
    clearInterval(this.#maintenance);
    this.#dialBack.stop();
    this.passHolder.stop();
    this.rpc.stop();
    await this.libp2p.stop();
  }

  /** Dials a peer by multiaddr (with /p2p/) and waits for the hello exchange. */
  async connect(address: string): Promise<string> {
    const connection = await this.libp2p.dial(multiaddr(address), { signal: AbortSignal.timeout(15_000) });
    const peer = connection.remotePeer.toString();
    if (!(await this.#hello(peer))) {
      throw new SwarmError(
        SwarmErrorCode.UNAUTHORIZED_PEER,
        `${address} did not accept us or showed no valid pass: ${this.authorizer.denialOf(peer) ?? this.refusedBy.of(peer)?.reason ?? "hello failed"}`,
        { peer },
      );
    }
    return peer;
  }

  /**
   * Applies the organizer's revocation list (from the newest run control): passes of these
   * usernames, and passes issued on these grants (revoked tokens), are refused from now on at every
   * layer, and every admitted peer whose pass is revoked is denied and hung up on. Replaces the
   * previous list. Returns the peers dropped. A dropped peer may come back at once with a pass of
   * another grant: no key is refused as such.
   */
  applyRevocations(revoked: RevocationList): string[] {
    this.#passes.setRevoked(revoked);
    const dropped: string[] = [];
    for (const peer of this.authorizer.admittedPeers()) {
      const pass = this.authorizer.passOf(peer);
      const reason = pass === undefined ? undefined : this.#passes.revocationOf(pass);
      if (reason === undefined) continue;
      this.authorizer.deny(peer, reason, REFUSED_DENY_MS);
      this.refusedPeers.record(peer, ProtocolErrorCode.PASS_REVOKED, reason);
      dropped.push(peer);
      this.#logger.info({ peer, username: pass?.username }, `dropped a revoked peer: ${reason}`);
      void this.libp2p.hangUp(peerIdFromString(peer)).catch(() => undefined);
    }
    return dropped;
  }

  /**
   * The authority's key was rotated and this node follows it (its pass verifier trusts the new key
   * already): peers gated for showing a pass of a key this node did not trust are let in again,
   * connected peers it no longer counts as members are greeted again and the others dialed, and
   * this node fetches a pass of the new key.
   */
  #followedRotation(): void {
    const forgiven = this.authorizer.forgiveKeyDenials();
    for (const peer of forgiven) this.#dialBackoff.delete(peer);
    this.#logger.info(
      { forgiven: forgiven.length },
      "following the experiment's new authority key: peers with passes of it are let in",
    );
    this.passHolder.renewIfOutdated();
    if (!this.#running) return;
    for (const id of this.libp2p.getPeers()) {
      const peer = id.toString();
      if (!this.authorizer.isAdmitted(peer)) void this.#hello(peer);
    }
    this.#peerStoreChanged = true;
    this.#refreshWaitMs = MEMBER_REFRESH_MS;
    this.#lastRefresh = 0;
    void this.#maintain();
  }

  /**
   * Calls `listener` with a member each time a hello passes between it and this node (when it
   * connects, and at each member-list refresh); returns the unsubscribe function.
   */
  onGreeted(listener: (peer: string) => void): () => void {
    this.#greetedListeners.add(listener);
    return () => this.#greetedListeners.delete(listener);
  }

  /** How this node is connected to `peer`: directly, through a relay, or not at all. */
  pathTo(peer: string): "direct" | "relayed" | undefined {
    const connections = this.libp2p.getConnections(peerIdFromString(peer));
    if (connections.length === 0) return undefined;
    return connections.some((connection) => !connection.remoteAddr.toString().includes("/p2p-circuit"))
      ? "direct"
      : "relayed";
  }

  /** This node's mode and how many members it reaches by each path (see Connectivity). */
  connectivity(): Connectivity {
    const counts = { direct: 0, relayed: 0, upgraded: 0 };
    for (const peer of this.members()) {
      const path = this.pathTo(peer);
      if (path === "relayed") counts.relayed += 1;
      else if (path === "direct") counts[this.#upgraded.has(peer) ? "upgraded" : "direct"] += 1;
    }
    return { mode: this.#mode, reachability: this.#reachability, ...counts };
  }

  /**
   * Asks a connected aux peer to dial this node back (net/reachability.ts) and acts on the answer:
   * reached, it announces the address it was reached at and stays a full node; not reached, it
   * runs as a client through an aux peer's relay (see ReachabilityState). Without an aux peer to
   * ask it changes nothing (undefined), and maintenance asks again later.
   */
  checkReachability(): Promise<Reachability | undefined> {
    if (this.#mode === "aux") return Promise.resolve(undefined);
    this.#reachabilityInFlight ??= this.#checkReachability().finally(() => {
      this.#reachabilityInFlight = undefined;
    });
    return this.#reachabilityInFlight;
  }

  async #checkReachability(): Promise<Reachability | undefined> {
    const auxPeers = this.members().filter((peer) => this.modeOf(peer) === "aux");
    if (auxPeers.length === 0) return undefined;
    this.#reachabilityCheckedAt = Date.now();
    const direct = this.multiaddrs().filter((address) => !address.includes("/p2p-circuit"));
    const result = await checkReachability(this.rpc, auxPeers, tcpPorts(direct));
    if (!this.#running) return result;
    this.#firstCheckPending = false;
    if (result.reachable) {
      this.#reachability = "direct";
      this.#reachedAt = result.address;
      this.#logger.info(
        { address: result.address, checkedBy: result.checkedBy },
        `reachable at ${result.address} (an aux peer dialed back): taking part as a full node`,
      );
    } else {
      this.#reachability = "relayed";
      this.#reachedAt = undefined;
      if (this.#mode === "node") this.#mode = "client";
      this.#logger.warn(
        { reason: result.reason, observed: result.observed },
        `not reachable from outside (${result.reason}): taking part through an aux peer's relay, sending and receiving gradients without reducing a part. Forwarding a TCP port to this machine and passing --listen makes it a full node`,
      );
      await this.#reserveRelay();
    }
    await this.#announce();
    return result;
  }

  /**
   * Holds a slot on a connected aux peer's circuit relay, so members that cannot dial this node
   * directly reach it there. Tried again with a growing pause when it fails, and again whenever the
   * slot is lost (the aux restarted or the connection dropped).
   */
  async #reserveRelay(): Promise<void> {
    const manager = this.#transports.manager;
    if (manager === undefined || this.#reserving || !this.#running) return;
    if (Date.now() < this.#reserveBackoff.nextAt || this.#hasRelayAddress()) return;
    const relay = this.#relayAddress();
    if (relay === undefined) return;
    this.#reserving = true;
    try {
      await manager.listen([multiaddr(`${relay.address}/p2p-circuit`)]);
      this.#reserveBackoff = { nextAt: 0, delayMs: FIRST_RESERVE_BACKOFF_MS / 2 };
      const relayed = this.multiaddrs().filter((address) => address.includes("/p2p-circuit"));
      this.#logger.info(
        { relay: relay.peer, addresses: relayed },
        `holding a relay slot on aux peer ${relay.peer}: members that cannot dial this node reach it there`,
      );
      await this.#announce();
    } catch (error) {
      const delayMs = Math.min(this.#reserveBackoff.delayMs * 2, MAX_RESERVE_BACKOFF_MS);
      this.#reserveBackoff = { nextAt: Date.now() + delayMs, delayMs };
      this.#logger.warn(
        { relay: relay.peer, err: error, retryInSeconds: delayMs / 1000 },
        `could not get a relay slot on aux peer ${relay.peer}; trying again in ${Math.round(delayMs / 1000)} s`,
      );
    } finally {
      this.#reserving = false;
    }
  }

  #hasRelayAddress(): boolean {
    return this.multiaddrs().some((address) => address.includes("/p2p-circuit"));
  }

  /** A connected aux peer and an address of it (with /p2p/) to reserve a relay slot through. */
  #relayAddress(): { peer: string; address: string } | undefined {
    for (const peer of this.members()) {
      if (this.modeOf(peer) !== "aux") continue;
      const connection = this.libp2p
        .getConnections(peerIdFromString(peer))
        .find(
          (candidate) =>
            candidate.direction === "outbound" && !candidate.remoteAddr.toString().includes("/p2p-circuit"),
        );
      const address =
        connection?.remoteAddr.toString() ??
        this.#announced.get(peer)?.find((addr) => !addr.includes("/p2p-circuit"));
      if (address === undefined) continue;
      return { peer, address: address.includes("/p2p/") ? address : `${address}/p2p/${peer}` };
    }
    return undefined;
  }

  /** Tells every connected member this node's mode and addresses again (after they changed). */
  async #announce(): Promise<void> {
    await Promise.all(
      this.members().map(async (peer) => {
        try {
          await this.#exchangeHello(peer);
        } catch (error) {
          this.#logger.debug({ peer, err: error }, "could not tell a member our new addresses");
        }
      }),
    );
  }

  #greeted(peer: string): void {
    const path = this.pathTo(peer);
    const before = this.#paths.get(peer);
    if (path !== undefined && before !== path) {
      this.#paths.set(peer, path);
      const upgraded = before === "relayed" && path === "direct";
      if (upgraded) this.#upgraded.add(peer);
      else if (path === "relayed") this.#upgraded.delete(peer);
      const how = upgraded
        ? "directly: the relayed connection was upgraded (hole punched)"
        : path === "direct"
          ? "directly"
          : "through an aux peer's relay";
      this.#logger.info(
        { peer, mode: this.modeOf(peer), path: upgraded ? "upgraded" : path },
        `connected to member ${peer} (${this.modeOf(peer) ?? "unknown mode"}) ${how}`,
      );
    }
    if (
      this.#reachability === "unknown" &&
      this.modeOf(peer) === "aux" &&
      this.#mode === "node" &&
      this.#options.checkReachability !== false
    ) {
      void this.checkReachability().catch(() => undefined);
    }
    for (const listener of this.#greetedListeners) {
      try {
        listener(peer);
      } catch (error) {
        this.#logger.warn({ peer, err: error }, "a hello listener threw");
      }
    }
  }

  /** The averaging mode a member announced in its hello (undefined before the hello). */
  modeOf(peer: string): AveragingMode | undefined {
    return this.#modes.get(peer);
  }

  #onConnection(connection: Connection): void {
    const peer = connection.remotePeer.toString();
    if (!this.#running) return;
    this.#dialBackoff.delete(peer);
    if (connection.direction === "outbound") {
      void this.#hello(peer);
      return;
    }
    // An inbound peer must say hello (show its pass) in time, or it is dropped.
    const connectedAt = (this.#options.now ?? Date.now)();
    void this.authorizer.waitFor(peer, this.#options.helloTimeoutMs ?? 10_000).then(async (admitted) => {
      if (admitted || !this.#running) return;
      // A peer whose pass was refused just now (revoked, expired, another key's) has its own reason
      // and gate, set with the refusal: it may come back at once with a good pass, as a volunteer
      // who re-tokens does, and so may one whose pass of a new key this node refused until it
      // followed the rotation. Only a peer that showed no pass at all is gated for the usual while.
      const refused = this.refusedPeers.of(peer);
      const now = (this.#options.now ?? Date.now)();
      const refusedNow =
        (refused !== undefined && now - refused.at <= 2 * (this.#options.helloTimeoutMs ?? 10_000)) ||
        this.authorizer.forgivenSince(peer, connectedAt);
      if (!this.authorizer.isDenied(peer) && !refusedNow) {
        this.authorizer.deny(peer, "showed no valid access pass");
      }
      this.#logger.info({ peer }, "dropped a peer that showed no valid access pass");
      await this.libp2p.hangUp(connection.remotePeer).catch(() => undefined);
    });
  }

  /** Gates and drops a peer whose hello named a mode its pass's role does not allow. */
  #refuseMode(peer: string, error: unknown): void {
    const reason = error instanceof Error ? error.message : String(error);
    this.authorizer.deny(peer, reason);
    this.#logger.warn({ peer, reason }, `refused member ${peer}: ${reason}`);
    void this.libp2p.hangUp(peerIdFromString(peer)).catch(() => undefined);
  }

  /** Tells `peer` this node's mode and addresses, and learns its own and the members it knows. */
  async #exchangeHello(peer: string): Promise<void> {
    const answer = await this.rpc.request(peer, helloMethod, { mode: this.#mode, addrs: this.#ownAddrs() });
    const role = this.authorizer.passOf(peer)?.role;
    if (role === undefined) {
      throw new SwarmError(
        SwarmErrorCode.UNAUTHORIZED_PEER,
        `${peer} answered the hello without a valid pass`,
      );
    }
    try {
      checkModeFitsRole(answer.mode, role, "a hello answer");
    } catch (error) {
      this.#refuseMode(peer, error);
      throw error;
    }
    this.#modes.set(peer, answer.mode);
    this.#announced.set(peer, answer.addrs);
    await this.#learnAddrs(peer, answer.addrs);
    await this.#learnMembers(answer.peers);
  }

  async #hello(peer: string): Promise<boolean> {
    if (this.authorizer.isAdmitted(peer) && this.#modes.has(peer)) return true;
    const inFlight = this.#helloInFlight.get(peer);
    if (inFlight !== undefined) return inFlight;
    const attempt = (async () => {
      try {
        await this.#exchangeHello(peer);
        this.#greeted(peer);
        return true;
      } catch (error) {
        if (!this.#running) return false;
        const reason = isSwarmError(error) || error instanceof Error ? error.message : String(error);
        this.#logger.info({ peer, reason }, "hello failed; disconnecting");
        // An invalid pass of the peer's is gated for a while; a slow or vanished peer may simply
        // retry, and so may one that refused ours (the fault is this node's pass, not that peer).
        const refusedOurs =
          isSwarmError(error, SwarmErrorCode.REMOTE_ERROR) &&
          error.remoteCode !== undefined &&
          isCredentialRefusal(error.remoteCode);
        const transient =
          refusedOurs ||
          isSwarmError(error, SwarmErrorCode.TIMEOUT) ||
          isSwarmError(error, SwarmErrorCode.PEER_UNREACHABLE);
        if (isProtocolError(error) && isKeyRefusal(error.code)) {
          // Its pass may be of a key the authority rotated to: gated, and let in on the rotation.
          this.authorizer.denyForKey(peer, reason, UNTRUSTED_KEY_DENY_MS);
        } else if (!transient) this.authorizer.deny(peer, reason);
        await this.libp2p.hangUp(peerIdFromString(peer)).catch(() => undefined);
        return false;
      } finally {
        this.#helloInFlight.delete(peer);
      }
    })();
    this.#helloInFlight.set(peer, attempt);
    return attempt;
  }

  /** The addresses this node tells members, by how it can be reached (see ReachabilityState). */
  #ownAddrs(): string[] {
    const all = this.multiaddrs();
    const relayed = all.filter((address) => address.includes("/p2p-circuit"));
    const direct = all.filter((address) => !address.includes("/p2p-circuit"));
    switch (this.#reachability) {
      case "relayed":
        // Its private and loopback addresses would only cost every member failed dials.
        return relayed.slice(0, 16);
      case "direct": {
        const first = this.#reachedAt === undefined ? [] : [this.#reachedAt];
        const rest = this.#options.listenViaRelays === true ? all : direct;
        return [...new Set([...first, ...rest])].slice(0, 16);
      }
      case "unknown":
        // Members reach it over the connections it opens meanwhile.
        return this.#firstCheckPending ? [] : all.slice(0, 16);
    }
  }

  /** Other members and how to reach them: what they announced, else where we reached them. */
  #knownPeers(except: string): Array<{ peerId: string; addrs: string[] }> {
    const result: Array<{ peerId: string; addrs: string[] }> = [];
    for (const peer of this.members()) {
      if (peer === except || result.length >= HELLO_MAX_PEERS) continue;
      const dialed = this.libp2p
        .getConnections(peerIdFromString(peer))
        .filter((connection) => connection.direction === "outbound")
        .map((connection) => connection.remoteAddr.toString());
      const addrs = [...new Set([...(this.#announced.get(peer) ?? []), ...dialed])].slice(0, 16);
      result.push({ peerId: peer, addrs });
    }
    return result;
  }

  /** Remembers members listed in a hello answer and dials the ones we are not connected to. */
  async #learnMembers(peers: ReadonlyArray<{ peerId: string; addrs: string[] }>): Promise<void> {
    let fresh = false;
    for (const member of peers) {
      if (member.peerId === this.peerId || member.addrs.length === 0) continue;
      await this.#learnAddrs(member.peerId, member.addrs);
      if (!this.#introduced.has(member.peerId)) fresh = true;
      this.#introduced.add(member.peerId);
    }
    if (fresh) {
      this.#refreshWaitMs = MEMBER_REFRESH_MS;
      void this.#maintain();
    }
  }

  /** Asks one random member for its member list, so peers that joined later are found. */
  async #refreshMembers(): Promise<void> {
    const members = this.members().filter((peer) => this.modeOf(peer) !== "client");
    const peer = members[Math.floor(Math.random() * members.length)];
    if (peer === undefined) return;
    // Back off while refreshes bring nothing new; #learnMembers resets this when one does.
    this.#refreshWaitMs = Math.min(MAX_MEMBER_REFRESH_MS, this.#refreshWaitMs * 2);
    try {
      const answer = await this.rpc.request(peer, helloMethod, { mode: this.#mode, addrs: this.#ownAddrs() });
      await this.#learnMembers(answer.peers);
    } catch (error) {
      this.#logger.debug({ peer, err: error }, "member list refresh failed");
    }
  }

  async #learnAddrs(peer: string, addrs: readonly string[]): Promise<void> {
    if (peer === this.peerId || addrs.length === 0) return;
    const key = addrs.join(" ");
    if (this.#merged.get(peer) === key) return;
    this.#merged.set(peer, key);
    if (this.#merged.size > 4 * (this.#options.maxPeers ?? 64)) {
      const oldest = this.#merged.keys().next().value;
      if (oldest !== undefined) this.#merged.delete(oldest);
    }
    this.#peerStoreChanged = true;
    let id: PeerId;
    try {
      id = peerIdFromString(peer);
      const parsed = addrs.map((address) => multiaddr(address));
      await this.libp2p.peerStore.merge(id, { multiaddrs: parsed });
    } catch (error) {
      this.#logger.debug({ peer, err: error }, "ignored unusable addresses");
    }
  }

  async #bootstrap(): Promise<void> {
    for (const address of this.#options.bootstrap ?? []) {
      try {
        await this.connect(address);
      } catch (error) {
        this.#logger.warn({ address, err: error }, "could not reach a bootstrap peer; will retry");
      }
    }
  }

  /** Keeps the swarm meshed: reconnects to bootstrap peers and dials known members it is not connected to. */
  async #maintain(): Promise<void> {
    if (!this.#running) return;
    if (this.#mode !== "aux") {
      if (this.#reachability === "relayed" || this.#options.listenViaRelays === true)
        void this.#reserveRelay();
      else if (
        this.#reachability === "unknown" &&
        this.#mode === "node" &&
        this.#options.checkReachability !== false &&
        Date.now() - this.#reachabilityCheckedAt >= REACHABILITY_RETRY_MS
      ) {
        void this.checkReachability().catch(() => undefined);
      }
    }
    const connected = new Set(this.libp2p.getPeers().map((peer) => peer.toString()));
    if (connected.size === 0) await this.#bootstrap();
    else if (Date.now() - this.#lastRefresh >= this.#refreshWaitMs) {
      this.#lastRefresh = Date.now();
      void this.#refreshMembers();
    }
    const maxPeers = this.#options.maxPeers ?? 64;
    if (connected.size >= maxPeers) return;
    // Walking the peer store decodes every entry; with nothing new to dial it is only a backstop.
    const now = Date.now();
    if (!this.#peerStoreChanged && now < this.#redialAt && now - this.#lastPeerStoreScan < PEER_STORE_SCAN_MS)
      return;
    this.#peerStoreChanged = false;
    this.#lastPeerStoreScan = now;
    this.#redialAt = Infinity;
    for (const peer of await this.libp2p.peerStore.all()) {
      const id = peer.id.toString();
      if (
        id === this.peerId ||
        connected.has(id) ||
        this.authorizer.isDenied(id) ||
        peer.addresses.length === 0
      )
        continue;
      const speaksHello = peer.protocols.includes(protocolId(this.#options.experimentId, helloMethod.name));
      if (!speaksHello && !this.#introduced.has(id)) continue;
      const backoff = this.#dialBackoff.get(id);
      if (backoff !== undefined && Date.now() < backoff.nextAt) {
        this.#redialAt = Math.min(this.#redialAt, backoff.nextAt);
        continue;
      }
      const addresses = peer.addresses.map((address) => address.multiaddr.toString());
      void this.libp2p.dial(peer.id, { signal: stallAwareSignal(10_000) }).then(
        () => this.#dialBackoff.delete(id),
        (error: unknown) => {
          this.#dialFailed(id, addresses, error);
        },
      );
    }
  }

  /**
   * A member we could not dial waits before the next try, twice as long each time up to
   * MAX_DIAL_BACKOFF_MS, so an unreachable member (behind NAT, announcing private addresses) costs
   * a few connection attempts, not one every two seconds. The first failure, and then every fourth,
   * is logged with the addresses tried and why.
   */
  #dialFailed(peer: string, addresses: readonly string[], error: unknown): void {
    if (!this.#running) return;
    const previous = this.#dialBackoff.get(peer);
    const delayMs = Math.min((previous?.delayMs ?? FIRST_DIAL_BACKOFF_MS / 2) * 2, MAX_DIAL_BACKOFF_MS);
    const failures = (previous?.failures ?? 0) + 1;
    this.#dialBackoff.set(peer, { nextAt: Date.now() + delayMs, delayMs, failures });
    this.#redialAt = Math.min(this.#redialAt, Date.now() + delayMs);
    if (failures % 4 !== 1) return;
    const reason = error instanceof Error ? error.message : String(error);
    this.#logger.warn(
      { peer, addresses, failures, retryInSeconds: delayMs / 1000, reason },
      `could not reach member ${peer} at the addresses it announced (${reason}); trying again in ${Math.round(delayMs / 1000)} s. A member behind NAT can only be reached through a relay`,
    );
  }
}

/** A pass refused for its signing key: maybe one the authority rotated to and this node has not followed yet. */
function isKeyRefusal(code: string): boolean {
  return code === ProtocolErrorCode.PASS_BAD_SIGNATURE || code === ProtocolErrorCode.PASS_KEY_ROTATED;
}

/** The origin's peer id and the message's sequence number (StrictSign messages carry both). */
function fastMessageId(message: { from?: Uint8Array; seqno?: Uint8Array }): string {
  const from = message.from === undefined ? "" : toBase64Url(message.from);
  const seqno = message.seqno === undefined ? "" : toBase64Url(message.seqno);
  return `${from}/${seqno}`;
}
