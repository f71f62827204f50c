import type { PeerId } from "@libp2p/interface";
import { peerIdFromString } from "@libp2p/peer-id";
import { multiaddr } from "@multiformats/multiaddr";
import type { Logger } from "pino";
import { stallAwareSignal } from "../time/stall-aware-timeout.ts";
import type { SwarmLibp2p } from "./swarm-libp2p.ts";

/** Even with nothing new, the dialer walks the peer store for members to redial this often. */
const PEER_STORE_SCAN_MS = 30_000;
/** After a failed dial of a member, wait this long, doubling per failure up to the maximum. */
const FIRST_DIAL_BACKOFF_MS = 5_000;
const MAX_DIAL_BACKOFF_MS = 5 * 60_000;

/** What the dialer needs of its node. */
export interface MemberDialerHost {
  readonly libp2p: SwarmLibp2p;
  readonly logger: Logger;
  /** This node's PeerId. */
  readonly self: string;
  /** Stop dialing beyond this many connections. */
  readonly maxPeers: number;
  /** The protocol of the swarm's hello: a peer that speaks it is a member worth dialing. */
  readonly helloProtocol: string;
  running(): boolean;
  /** Gated by the pass gate: not dialed. */
  isDenied(peer: string): boolean;
  /** Introduced by another member's hello answer (its protocols may not be known yet). */
  introduced(peer: string): boolean;
}

/**
 * Keeps this node dialing the members it knows of and is not connected to: the addresses members
 * announce go into libp2p's peer store (only when they changed), and each maintenance pass walks
 * it when something changed, a backoff ran out, or PEER_STORE_SCAN_MS passed. A member that cannot
 * be dialed waits before the next try, twice as long each time up to MAX_DIAL_BACKOFF_MS, so an
 * unreachable member (behind NAT, announcing private addresses) costs a few connection attempts,
 * not one every two seconds; the first failure, and then every fourth, is logged with the
 * addresses tried and why.
 */
export class MemberDialer {
  readonly #host: MemberDialerHost;
  /** Members whose last dial failed: when to try again, and how long the wait was. */
  readonly #backoff = new Map<string, { nextAt: number; delayMs: number; failures: number }>();
  /** The addresses last merged into the peer store per member, so unchanged ones are not merged again. */
  readonly #merged = new Map<string, string>();
  /** Whether a connection closed or addresses were learned since the peer store was last walked. */
  #storeChanged = true;
  #lastScan = 0;
  /** When the earliest member waiting out a backoff may be dialed again. */
  #redialAt = Infinity;

  constructor(host: MemberDialerHost) {
    this.#host = host;
  }

  /** Something changed that may make a walk of the peer store worthwhile (a disconnect, a rotation). */
  changed(): void {
    this.#storeChanged = true;
  }

  /** `peer` is connected (or let in again): no backoff holds for it. */
  reached(peer: string): void {
    this.#backoff.delete(peer);
  }

  /** Merges the addresses `peer` announced into the peer store, when they changed. */
  async learn(peer: string, addrs: readonly string[]): Promise<void> {
    const host = this.#host;
    if (peer === host.self || addrs.length === 0) return;
    const key = addrs.join(" ");
    if (this.#merged.get(peer) === key) return;
    this.#merged.set(peer, key);
    if (this.#merged.size > 4 * host.maxPeers) {
      const oldest = this.#merged.keys().next().value;
      if (oldest !== undefined) this.#merged.delete(oldest);
    }
    this.#storeChanged = true;
    let id: PeerId;
    try {
      id = peerIdFromString(peer);
      const parsed = addrs.map((address) => multiaddr(address));
      await host.libp2p.peerStore.merge(id, { multiaddrs: parsed });
    } catch (error) {
      host.logger.debug({ peer, err: error }, "ignored unusable addresses");
    }
  }

  /** Dials the known members this node is not connected to (`connected`), unless it has enough. */
  async dialKnown(connected: ReadonlySet<string>): Promise<void> {
    const host = this.#host;
    if (connected.size >= host.maxPeers) return;
    // Walking the peer store decodes every entry; with nothing new to dial it is only a backstop.
    const now = Date.now();
    if (!this.#storeChanged && now < this.#redialAt && now - this.#lastScan < PEER_STORE_SCAN_MS) return;
    this.#storeChanged = false;
    this.#lastScan = now;
    this.#redialAt = Infinity;
    for (const peer of await host.libp2p.peerStore.all()) {
      const id = peer.id.toString();
      if (id === host.self || connected.has(id) || host.isDenied(id) || peer.addresses.length === 0) continue;
      if (!peer.protocols.includes(host.helloProtocol) && !host.introduced(id)) continue;
      const backoff = this.#backoff.get(id);
      if (backoff !== undefined && Date.now() < backoff.nextAt) {
        this.#redialAt = Math.min(this.#redialAt, backoff.nextAt);
        continue;
      }
      const addresses = peer.addresses.map((address) => address.multiaddr.toString());
      void host.libp2p.dial(peer.id, { signal: stallAwareSignal(10_000) }).then(
        () => this.#backoff.delete(id),
        (error: unknown) => {
          this.#failed(id, addresses, error);
        },
      );
    }
  }

  #failed(peer: string, addresses: readonly string[], error: unknown): void {
    if (!this.#host.running()) return;
    const previous = this.#backoff.get(peer);
    const delayMs = Math.min((previous?.delayMs ?? FIRST_DIAL_BACKOFF_MS / 2) * 2, MAX_DIAL_BACKOFF_MS);
    const failures = (previous?.failures ?? 0) + 1;
    this.#backoff.set(peer, { nextAt: Date.now() + delayMs, delayMs, failures });
    this.#redialAt = Math.min(this.#redialAt, Date.now() + delayMs);
    if (failures % 4 !== 1) return;
    const reason = error instanceof Error ? error.message : String(error);
    this.#host.logger.warn(
      { peer, addresses, failures, retryInSeconds: delayMs / 1000, reason },
      `could not reach member ${peer} at the addresses it announced (${reason}); trying again in ${Math.round(delayMs / 1000)} s. A member behind NAT can only be reached through a relay`,
    );
  }
}
