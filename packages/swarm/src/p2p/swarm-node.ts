import type { Connection, Libp2p } from "@libp2p/interface";
import type { TransportManager } from "@libp2p/interface-internal";
import { type GossipSub } from "@libp2p/gossipsub";
import { peerIdFromString } from "@libp2p/peer-id";
import { multiaddr } from "@multiformats/multiaddr";
import { type AccessPassVerifier, ProtocolErrorCode, type RevocationList } from "@barnraise/protocol";
import type { Logger } from "pino";
import { SwarmError, SwarmErrorCode } from "../errors.ts";
import { DialBackServer, type Reachability } from "../net/reachability.ts";
import type { AuthorityKeys } from "../platform/authority-keys.ts";
import { Libp2pRpc, protocolId } from "../rpc/libp2p-rpc.ts";
import { helloMethod, type AveragingMode } from "./hello.ts";
import { PassHolder } from "./pass-holder.ts";
import { PeerAuthorizer } from "./peer-authorizer.ts";
import { type PassGateService } from "./pass-gate-service.ts";
import { RefusalLog } from "./refusal-log.ts";
import { unrefTimer } from "../time/unref-timer.ts";
import { createSwarmLibp2p } from "./swarm-libp2p.ts";
import { MemberDialer } from "./member-dialer.ts";
import { Membership } from "./membership.ts";
import { ReachabilityKeeper } from "./reachability-keeper.ts";
import type { Connectivity, ReachabilityState, SwarmNodeOptions } from "./swarm-node-options.ts";
import { createSwarmRpc, REFUSED_DENY_MS } from "./swarm-rpc.ts";

export type { RevocationList } from "@barnraise/protocol";
export type {
  Connectivity,
  ReachabilityState,
  SwarmNodeOptions,
  SwarmTransports,
} from "./swarm-node-options.ts";

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
 *
 * The node wires its parts, one concept each: libp2p and gossipsub (`swarm-libp2p.ts`), the signed
 * RPC (`swarm-rpc.ts`), reachability and relays (`reachability-keeper.ts`), the hello and who the
 * members are (`membership.ts`), and dial upkeep (`member-dialer.ts`).
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
  readonly #dialBack: DialBackServer;
  readonly #reach: ReachabilityKeeper;
  readonly #options: SwarmNodeOptions;
  readonly #logger: Logger;
  readonly #membership: Membership;
  readonly #dialer: MemberDialer;
  #maintenance: NodeJS.Timeout | undefined;
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
    this.#options = options;
    this.#logger = options.logger;
    this.#dialBack = new DialBackServer({
      rpc,
      dialFresh: async (address, signal) => {
        const connection = await libp2p.dial(multiaddr(address), { force: true, signal });
        await connection.close().catch(() => undefined);
      },
    });
    this.#dialer = new MemberDialer({
      libp2p,
      logger: options.logger,
      self: libp2p.peerId.toString(),
      maxPeers: options.maxPeers ?? 64,
      helloProtocol: protocolId(options.experimentId, helloMethod.name),
      running: () => this.#running,
      isDenied: (peer) => authorizer.isDenied(peer),
      introduced: (peer) => this.#membership.wasIntroduced(peer),
    });
    this.#membership = new Membership({
      libp2p,
      rpc,
      authorizer,
      dialer: this.#dialer,
      logger: options.logger,
      running: () => this.#running,
      mode: () => this.mode,
      ownAddrs: () => this.#reach.ownAddrs(),
      greeted: (peer) => {
        this.#reach.greeted(peer);
      },
      maintainSoon: () => {
        void this.#maintain();
      },
    });
    this.#reach = new ReachabilityKeeper(
      {
        rpc,
        logger: options.logger,
        running: () => this.#running,
        members: () => this.members(),
        modeOf: (peer) => this.modeOf(peer),
        multiaddrs: () => this.multiaddrs(),
        connections: (peer) => libp2p.getConnections(peerIdFromString(peer)),
        announced: (peer) => this.#membership.announcedBy(peer),
        transportManager: () => transports.manager,
        announce: () => this.#membership.announce(),
      },
      options,
    );
    this.#unfollow = options.authority.onRotation(() => {
      this.#followedRotation();
    });
  }

  /**
   * node: accepts connections and reduces; client: cannot be dialed directly (it said `--client`,
   * or an aux peer could not dial it back), so it only sends and receives; aux: a public helper.
   */
  get mode(): AveragingMode {
    return this.#reach.mode;
  }

  /** How other members reach this node (see ReachabilityState). */
  get reachability(): ReachabilityState {
    return this.#reach.state;
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
    const rpcRef: { current?: Libp2pRpc } = {};
    const transports: { manager?: TransportManager } = {};
    const libp2p = await createSwarmLibp2p(options, {
      authorizer,
      helloTimeoutMs,
      isSelfAuthenticated: (protocol) => rpcRef.current?.serves(protocol) ?? false,
      onTransportManager: (manager) => {
        transports.manager = manager;
      },
    });
    const refusals = { refusedPeers: new RefusalLog({ now }), refusedBy: new RefusalLog({ now }) };
    const rpc = createSwarmRpc({ libp2p, options, passes, passHolder, authorizer, refusals, now, maxSkewMs });
    rpcRef.current = rpc;
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
    return this.#membership.members();
  }

  async start(): Promise<void> {
    if (this.mode === "aux") this.#dialBack.start();
    this.#membership.serve();
    this.libp2p.addEventListener("connection:open", (event) => {
      this.#onConnection(event.detail);
    });
    this.libp2p.addEventListener("peer:disconnect", (event) => {
      this.#dialer.changed();
      this.#membership.disconnected(event.detail.toString());
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
    await this.#reach.start();
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
    if (!(await this.#membership.hello(peer))) {
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
    for (const peer of forgiven) this.#dialer.reached(peer);
    this.#logger.info(
      { forgiven: forgiven.length },
      "following the experiment's new authority key: peers with passes of it are let in",
    );
    this.passHolder.renewIfOutdated();
    if (!this.#running) return;
    for (const id of this.libp2p.getPeers()) {
      const peer = id.toString();
      if (!this.authorizer.isAdmitted(peer)) void this.#membership.hello(peer);
    }
    this.#dialer.changed();
    this.#membership.refreshSoon();
    void this.#maintain();
  }

  /**
   * Calls `listener` with a member each time a hello passes between it and this node (when it
   * connects, and at each member-list refresh); returns the unsubscribe function.
   */
  onGreeted(listener: (peer: string) => void): () => void {
    return this.#membership.onGreeted(listener);
  }

  /** How this node is connected to `peer`: directly, through a relay, or not at all. */
  pathTo(peer: string): "direct" | "relayed" | undefined {
    return this.#membership.pathTo(peer);
  }

  /** This node's mode and how many members it reaches by each path (see Connectivity). */
  connectivity(): Connectivity {
    const counts = { direct: 0, relayed: 0, upgraded: 0 };
    let webrtc = 0;
    for (const peer of this.members()) {
      const path = this.pathTo(peer);
      if (path === "relayed") counts.relayed += 1;
      else if (path === "direct") {
        counts[this.#membership.isUpgraded(peer) ? "upgraded" : "direct"] += 1;
        const connections = this.libp2p.getConnections(peerIdFromString(peer));
        if (connections.some((connection) => connection.remoteAddr.toString().includes("/webrtc")))
          webrtc += 1;
      }
    }
    return { mode: this.mode, reachability: this.reachability, ...counts, ...(webrtc > 0 ? { webrtc } : {}) };
  }

  /**
   * Asks a connected aux peer to dial this node back (net/reachability.ts) and acts on the answer:
   * reached, it announces the address it was reached at and stays a full node; not reached, it
   * runs as a client through an aux peer's relay (see ReachabilityState). Without an aux peer to
   * ask it changes nothing (undefined), and maintenance asks again later.
   */
  checkReachability(): Promise<Reachability | undefined> {
    return this.#reach.check();
  }

  /** The averaging mode a member announced in its hello (undefined before the hello). */
  modeOf(peer: string): AveragingMode | undefined {
    return this.#membership.modeOf(peer);
  }

  #onConnection(connection: Connection): void {
    const peer = connection.remotePeer.toString();
    if (!this.#running) return;
    this.#dialer.reached(peer);
    if (connection.direction === "outbound") {
      void this.#membership.hello(peer);
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

  async #bootstrap(): Promise<void> {
    for (const address of this.#options.bootstrap ?? []) {
      try {
        await this.connect(address);
      } catch (error) {
        // An address none of this runtime's transports dials (TCP in a browser): the peer's other
        // addresses are for it; nothing to warn about.
        const undialable = error instanceof Error && error.name === "NoValidAddressesError";
        this.#logger[undialable ? "debug" : "warn"](
          { address, err: error },
          "could not reach a bootstrap peer; will retry",
        );
      }
    }
  }

  /** Keeps the swarm meshed: reconnects to bootstrap peers and dials known members it is not connected to. */
  async #maintain(): Promise<void> {
    if (!this.#running) return;
    this.#reach.upkeep();
    const connected = new Set(this.libp2p.getPeers().map((peer) => peer.toString()));
    if (connected.size === 0) await this.#bootstrap();
    else this.#membership.refreshIfDue(Date.now());
    await this.#dialer.dialKnown(connected);
  }
}
