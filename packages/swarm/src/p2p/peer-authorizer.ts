import type { AccessPass } from "@barnraise/protocol";
import type { ConnectionGater, PeerId } from "@libp2p/interface";
import type { Multiaddr } from "@multiformats/multiaddr";

/** How long `forgivenSince` remembers a lifted denial: longer than any wait for a hello. */
const FORGIVEN_MEMORY_MS = 2 * 60_000;

export interface PeerAuthorizerOptions {
  now?: () => number;
  /** How long a peer that failed to show a valid pass stays refused; default 60 s. */
  denyMs?: number;
}

/**
 * Which remote peers have shown a valid access pass for this experiment, and which are refused.
 * The libp2p connection gater, the pass gate in front of libp2p's own protocols (identify, gossipsub,
 * relay …) and the swarm's membership all read from here. A peer is admitted when a signed
 * request or response carrying its pass verifies; it stays admitted until that pass expires.
 */
export class PeerAuthorizer {
  readonly #now: () => number;
  readonly #denyMs: number;
  readonly #admitted = new Map<string, AccessPass>();
  readonly #denied = new Map<string, { until: number; reason: string; forKey?: true }>();
  readonly #waiters = new Map<string, Set<() => void>>();
  /** When a peer's denial for an untrusted key was last lifted (kept a couple of minutes). */
  readonly #forgivenAt = new Map<string, number>();

  constructor(options: PeerAuthorizerOptions = {}) {
    this.#now = options.now ?? Date.now;
    this.#denyMs = options.denyMs ?? 60_000;
  }

  /** Records a verified pass for `peer` (the newest-expiring one wins). */
  admit(peer: string, pass: AccessPass): void {
    const known = this.#admitted.get(peer);
    if (known === undefined || pass.expiresAt >= known.expiresAt) this.#admitted.set(peer, pass);
    this.#denied.delete(peer);
    const waiters = this.#waiters.get(peer);
    this.#waiters.delete(peer);
    for (const wake of waiters ?? []) wake();
  }

  /** The peer's pass when it is admitted and the pass has not expired. */
  passOf(peer: string): AccessPass | undefined {
    const pass = this.#admitted.get(peer);
    if (pass === undefined) return undefined;
    if (pass.expiresAt <= this.#now()) {
      this.#admitted.delete(peer);
      return undefined;
    }
    return pass;
  }

  isAdmitted(peer: string): boolean {
    return this.passOf(peer) !== undefined;
  }

  /** Refuses `peer` for a while (default `denyMs`): its connections are dropped and new ones are gated. */
  deny(peer: string, reason: string, forMs: number = this.#denyMs): void {
    this.#admitted.delete(peer);
    this.#denied.set(peer, { until: this.#now() + forMs, reason });
  }

  /**
   * Refuses `peer` for a while for showing a pass signed by a key this node does not trust: maybe
   * one the authority rotated to and this node has not followed yet, so the denial is lifted by
   * `forgiveKeyDenials` when it does.
   */
  denyForKey(peer: string, reason: string, forMs: number): void {
    this.#admitted.delete(peer);
    this.#denied.set(peer, { until: this.#now() + forMs, reason, forKey: true });
  }

  /** Lifts every denial made by `denyForKey` (the node now trusts a new key); returns those peers. */
  forgiveKeyDenials(): string[] {
    const now = this.#now();
    for (const [peer, at] of this.#forgivenAt)
      if (now - at > FORGIVEN_MEMORY_MS) this.#forgivenAt.delete(peer);
    const forgiven: string[] = [];
    for (const [peer, denial] of this.#denied) {
      if (denial.forKey !== true) continue;
      this.#denied.delete(peer);
      if (denial.until > now) {
        forgiven.push(peer);
        this.#forgivenAt.set(peer, now);
      }
    }
    return forgiven;
  }

  /**
   * Whether `peer` showed a pass of an untrusted key that `forgiveKeyDenials` let in at or after
   * `at`: it did show a pass, so it is not one that connected and said nothing.
   */
  forgivenSince(peer: string, at: number): boolean {
    const forgivenAt = this.#forgivenAt.get(peer);
    return forgivenAt !== undefined && forgivenAt >= at;
  }

  denialOf(peer: string): string | undefined {
    const denial = this.#denied.get(peer);
    if (denial === undefined) return undefined;
    if (denial.until <= this.#now()) {
      this.#denied.delete(peer);
      return undefined;
    }
    return denial.reason;
  }

  isDenied(peer: string): boolean {
    return this.denialOf(peer) !== undefined;
  }

  /** Resolves true once `peer` is admitted, or false after `timeoutMs`. */
  async waitFor(peer: string, timeoutMs: number): Promise<boolean> {
    if (this.isAdmitted(peer)) return true;
    if (this.isDenied(peer)) return false;
    return new Promise<boolean>((resolve) => {
      let waiters = this.#waiters.get(peer);
      if (waiters === undefined) this.#waiters.set(peer, (waiters = new Set()));
      const wake = () => {
        clearTimeout(timer);
        resolve(true);
      };
      const timer = setTimeout(() => {
        waiters.delete(wake);
        resolve(this.isAdmitted(peer));
      }, timeoutMs);
      waiters.add(wake);
    });
  }

  /** Peers admitted right now. */
  admittedPeers(): string[] {
    return [...this.#admitted.keys()].filter((peer) => this.isAdmitted(peer));
  }

  /**
   * The libp2p connection gater: refused peers cannot connect either way, and the relay only
   * reserves slots for, and forwards between, admitted peers.
   */
  gater(waitMs: number): ConnectionGater {
    const denied = (peer: PeerId) => this.isDenied(peer.toString());
    return {
      denyDialPeer: denied,
      // Members announce the addresses they have, LAN and loopback ones included; a node checks
      // the pass of whoever answers, not where it is. (libp2p's default in browsers refuses
      // private addresses, which would keep a tab from the aux on its own machine or network.)
      denyDialMultiaddr: () => false,
      denyInboundEncryptedConnection: denied,
      denyOutboundEncryptedConnection: denied,
      denyInboundRelayedConnection: (_relay: PeerId, remote: PeerId) => denied(remote),
      denyInboundRelayReservation: async (source: PeerId) => !(await this.waitFor(source.toString(), waitMs)),
      denyOutboundRelayedConnection: async (source: PeerId, destination: PeerId) =>
        !((await this.waitFor(source.toString(), waitMs)) && this.isAdmitted(destination.toString())),
      filterMultiaddrForPeer: (_peer: PeerId, _address: Multiaddr) => true,
    };
  }
}
