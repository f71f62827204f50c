import type { Connection } from "@libp2p/interface";
import type { TransportManager } from "@libp2p/interface-internal";
import { multiaddr } from "@multiformats/multiaddr";
import type { Logger } from "pino";
import { checkReachability, tcpPorts, type Reachability } from "../net/reachability.ts";
import type { Rpc } from "../rpc/rpc.ts";
import type { AveragingMode } from "./hello.ts";
import type { ReachabilityState } from "./swarm-node-options.ts";

/** While no aux peer could say whether this node is reachable, ask again this often. */
const REACHABILITY_RETRY_MS = 30_000;
/** After a failed relay reservation, wait this long, doubling up to a minute. */
const FIRST_RESERVE_BACKOFF_MS = 5_000;
const MAX_RESERVE_BACKOFF_MS = 60_000;

/** What the keeper needs of its node. */
export interface ReachabilityHost {
  readonly rpc: Rpc;
  readonly logger: Logger;
  /** Whether the node is running (nothing is started or announced once it stopped). */
  running(): boolean;
  /** The members this node has greeted, and the mode each said it runs in. */
  members(): string[];
  modeOf(peer: string): AveragingMode | undefined;
  /** This node's listen addresses now (relayed ones included, with /p2p/). */
  multiaddrs(): string[];
  /** This node's connections to `peer`. */
  connections(peer: string): Connection[];
  /** The addresses `peer` announced in its hello. */
  announced(peer: string): readonly string[] | undefined;
  /** libp2p's transport manager, through which relay slots are reserved (once libp2p built it). */
  transportManager(): TransportManager | undefined;
  /** Tells every connected member this node's mode and addresses again. */
  announce(): Promise<void>;
}

export interface ReachabilityKeeperOptions {
  readonly mode: AveragingMode;
  /** Whether to ask an aux peer to dial back (default true; aux peers never ask). */
  readonly checkReachability?: boolean | undefined;
  /** Hold relay slots even when reachable directly (see SwarmNodeOptions.listenViaRelays). */
  readonly listenViaRelays?: boolean | undefined;
}

/**
 * How a node can be reached, and what it does about it (see ReachabilityState): it asks a connected
 * aux peer to dial it back (net/reachability.ts). Reached, it announces the address it was reached
 * at and stays a full node; not reached (behind NAT), it runs on as a client and holds a slot on an
 * aux peer's circuit relay, made again whenever it is lost, with a growing pause after a failure. A
 * node no aux peer could check yet asks again every REACHABILITY_RETRY_MS. The keeper owns the
 * node's averaging mode, which a failed check turns from node into client.
 */
export class ReachabilityKeeper {
  readonly #host: ReachabilityHost;
  readonly #options: ReachabilityKeeperOptions;
  #mode: AveragingMode;
  #state: ReachabilityState = "unknown";
  /** The address an aux peer reached this node at (direct). */
  #reachedAt: string | undefined;
  #checkedAt = -Infinity;
  /** Until the first check at start is done, a node announces no address that may be unusable. */
  #firstCheckPending: boolean;
  #inFlight: Promise<Reachability | undefined> | undefined;
  #reserving = false;
  #reserveBackoff = { nextAt: 0, delayMs: FIRST_RESERVE_BACKOFF_MS / 2 };

  constructor(host: ReachabilityHost, options: ReachabilityKeeperOptions) {
    this.#host = host;
    this.#options = options;
    this.#mode = options.mode;
    if (options.mode === "client") this.#state = "relayed";
    this.#firstCheckPending = options.mode === "node" && options.checkReachability !== false;
  }

  /** The node's averaging mode now (a node found unreachable runs on as a client). */
  get mode(): AveragingMode {
    return this.#mode;
  }

  get state(): ReachabilityState {
    return this.#state;
  }

  /** Whether this node asks aux peers to dial it back at all. */
  get #checks(): boolean {
    return this.#mode === "node" && this.#options.checkReachability !== false;
  }

  /** At the node's start, once it is connected: takes a relay slot if it needs one, and checks. */
  async start(): Promise<void> {
    if (this.#mode === "aux") return;
    if (this.#holdsRelaySlot()) await this.reserveRelay();
    if (!this.#checks) return;
    await this.check().catch((error: unknown) => {
      this.#host.logger.warn(
        { err: error },
        "could not check whether this node is reachable; will try again",
      );
    });
    if (this.#firstCheckPending) {
      this.#firstCheckPending = false;
      if (this.#state === "unknown") await this.#host.announce();
    }
  }

  /** At every maintenance pass: keeps the relay slot, or asks again while nobody could check. */
  upkeep(): void {
    if (this.#mode === "aux") return;
    if (this.#holdsRelaySlot()) void this.reserveRelay();
    else if (
      this.#state === "unknown" &&
      this.#checks &&
      Date.now() - this.#checkedAt >= REACHABILITY_RETRY_MS
    ) {
      void this.check().catch(() => undefined);
    }
  }

  /** A member was greeted: an aux peer can check this node, if nobody has yet. */
  greeted(peer: string): void {
    if (this.#state === "unknown" && this.#host.modeOf(peer) === "aux" && this.#checks) {
      void this.check().catch(() => undefined);
    }
  }

  /**
   * Whether this node holds a relay slot on an aux peer: when it cannot be dialed, when it was asked
   * to (`listenViaRelays`), and by default when a browser might not dial it: a web page dials only
   * WebSockets, and a page of a platform served over HTTPS only secure ones, so a browser tab
   * reaches a node that listens on no secure WebSockets address through the aux's relay.
   */
  #holdsRelaySlot(): boolean {
    if (this.#state === "relayed") return true;
    if (this.#options.listenViaRelays !== undefined) return this.#options.listenViaRelays;
    return !this.#host
      .multiaddrs()
      .some((address) => !address.includes("/p2p-circuit") && /\/(wss|tls\/ws)(\/|$)/.test(address));
  }

  /** The addresses this node tells members, by how it can be reached (at most 16). */
  ownAddrs(): string[] {
    const all = this.#host.multiaddrs();
    const relayed = all.filter((address) => address.includes("/p2p-circuit"));
    const direct = all.filter((address) => !address.includes("/p2p-circuit"));
    switch (this.#state) {
      case "relayed":
        // Its private and loopback addresses would only cost every member failed dials.
        return relayed.slice(0, 16);
      case "direct": {
        const first = this.#reachedAt === undefined ? [] : [this.#reachedAt];
        const rest = this.#holdsRelaySlot() ? all : direct;
        return [...new Set([...first, ...rest])].slice(0, 16);
      }
      case "unknown":
        // Members reach it over the connections it opens meanwhile.
        return this.#firstCheckPending ? [] : all.slice(0, 16);
    }
  }

  /**
   * Asks a connected aux peer to dial this node back and acts on the answer. Without an aux peer
   * to ask it changes nothing (undefined), and maintenance asks again later.
   */
  check(): Promise<Reachability | undefined> {
    if (this.#mode === "aux") return Promise.resolve(undefined);
    this.#inFlight ??= this.#check().finally(() => {
      this.#inFlight = undefined;
    });
    return this.#inFlight;
  }

  async #check(): Promise<Reachability | undefined> {
    const host = this.#host;
    const auxPeers = host.members().filter((peer) => host.modeOf(peer) === "aux");
    if (auxPeers.length === 0) return undefined;
    this.#checkedAt = Date.now();
    const direct = host.multiaddrs().filter((address) => !address.includes("/p2p-circuit"));
    const result = await checkReachability(host.rpc, auxPeers, tcpPorts(direct));
    if (!host.running()) return result;
    this.#firstCheckPending = false;
    if (result.reachable) {
      this.#state = "direct";
      this.#reachedAt = result.address;
      host.logger.info(
        { address: result.address, checkedBy: result.checkedBy },
        `reachable at ${result.address} (an aux peer dialed back): taking part as a full node`,
      );
    } else {
      this.#state = "relayed";
      this.#reachedAt = undefined;
      if (this.#mode === "node") this.#mode = "client";
      host.logger.warn(
        { reason: result.reason, observed: result.observed },
        `not reachable from outside (${result.reason}): taking part through an aux peer's relay, sending and receiving gradients without reducing a part. Forwarding a TCP port to this machine and passing --listen makes it a full node`,
      );
      await this.reserveRelay();
    }
    await host.announce();
    return result;
  }

  /**
   * Holds a slot on a connected aux peer's circuit relay, so members that cannot dial this node
   * directly reach it there. Tried again with a growing pause when it fails, and again whenever the
   * slot is lost (the aux restarted or the connection dropped).
   */
  async reserveRelay(): Promise<void> {
    const host = this.#host;
    const manager = host.transportManager();
    if (manager === undefined || this.#reserving || !host.running()) return;
    if (Date.now() < this.#reserveBackoff.nextAt || this.#hasRelayAddress()) return;
    const relay = this.#relayAddress();
    if (relay === undefined) return;
    this.#reserving = true;
    try {
      await manager.listen([multiaddr(`${relay.address}/p2p-circuit`)]);
      this.#reserveBackoff = { nextAt: 0, delayMs: FIRST_RESERVE_BACKOFF_MS / 2 };
      const relayed = host.multiaddrs().filter((address) => address.includes("/p2p-circuit"));
      host.logger.info(
        { relay: relay.peer, addresses: relayed },
        `holding a relay slot on aux peer ${relay.peer}: members that cannot dial this node reach it there`,
      );
      await host.announce();
    } catch (error) {
      const delayMs = Math.min(this.#reserveBackoff.delayMs * 2, MAX_RESERVE_BACKOFF_MS);
      this.#reserveBackoff = { nextAt: Date.now() + delayMs, delayMs };
      host.logger.warn(
        { relay: relay.peer, err: error, retryInSeconds: delayMs / 1000 },
        `could not get a relay slot on aux peer ${relay.peer}; trying again in ${Math.round(delayMs / 1000)} s`,
      );
    } finally {
      this.#reserving = false;
    }
  }

  #hasRelayAddress(): boolean {
    return this.#host.multiaddrs().some((address) => address.includes("/p2p-circuit"));
  }

  /** A connected aux peer and an address of it (with /p2p/) to reserve a relay slot through. */
  #relayAddress(): { peer: string; address: string } | undefined {
    const host = this.#host;
    for (const peer of host.members()) {
      if (host.modeOf(peer) !== "aux") continue;
      const connection = host
        .connections(peer)
        .find(
          (candidate) =>
            candidate.direction === "outbound" && !candidate.remoteAddr.toString().includes("/p2p-circuit"),
        );
      const address =
        connection?.remoteAddr.toString() ??
        host.announced(peer)?.find((addr) => !addr.includes("/p2p-circuit"));
      if (address === undefined) continue;
      return { peer, address: address.includes("/p2p/") ? address : `${address}/p2p/${peer}` };
    }
    return undefined;
  }
}
