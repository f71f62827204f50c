import type { Libp2p } from "@libp2p/interface";
import { peerIdFromString } from "@libp2p/peer-id";
import { isProtocolError, ProtocolErrorCode } from "@barnraise/protocol";
import type { Logger } from "pino";
import { isSwarmError, SwarmError, SwarmErrorCode } from "../errors.ts";
import { isCredentialRefusal, type Libp2pRpc } from "../rpc/libp2p-rpc.ts";
import { checkModeFitsRole, HELLO_MAX_PEERS, helloMethod, type AveragingMode } from "./hello.ts";
import type { MemberDialer } from "./member-dialer.ts";
import type { PeerAuthorizer } from "./peer-authorizer.ts";
import { UNTRUSTED_KEY_DENY_MS } from "./swarm-rpc.ts";

/** How often a node asks a random member for the member list. */
const MEMBER_REFRESH_MS = 5_000;
/**
 * A refresh that brings no member this node did not know doubles the wait before the next, up to
 * this. Newcomers dial the members they learn of, so a meshed swarm hears of them anyway; the
 * refresh only repairs what those dials missed, and at 64 members each answer is a few KB.
 */
const MAX_MEMBER_REFRESH_MS = 60_000;

/** What the membership needs of the node it belongs to. */
export interface MembershipDeps {
  readonly libp2p: Libp2p;
  readonly rpc: Libp2pRpc;
  readonly authorizer: PeerAuthorizer;
  readonly dialer: MemberDialer;
  readonly logger: Logger;
  readonly running: () => boolean;
  /** This node's averaging mode and the addresses it announces, as of now. */
  readonly mode: () => AveragingMode;
  readonly ownAddrs: () => string[];
  /** Told each time a hello passes with `peer` (the reachability keeper counts its aux peers). */
  readonly greeted: (peer: string) => void;
  /** Runs the node's maintenance pass now (a member list brought someone new). */
  readonly maintainSoon: () => void;
}

/**
 * Who is in the swarm, as this node knows it: the hello exchange (each side shows its pass, its
 * averaging mode and its addresses, and the answer lists up to HELLO_MAX_PEERS other members), the
 * members' modes and announced addresses, the member-list refresh that finds peers who joined
 * later, and the path (direct or relayed) each member is reached by. A peer whose hello fails is
 * hung up on and, unless the failure was transient or this node's own pass, gated.
 */
export class Membership {
  readonly #deps: MembershipDeps;
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
  #lastRefresh = 0;
  #refreshWaitMs = MEMBER_REFRESH_MS;

  constructor(deps: MembershipDeps) {
    this.#deps = deps;
  }

  /** Connected peers that have shown a valid pass. */
  members(): string[] {
    const connected = new Set(this.#deps.libp2p.getPeers().map((peer) => peer.toString()));
    return this.#deps.authorizer.admittedPeers().filter((peer) => connected.has(peer));
  }

  /** The averaging mode a member announced in its hello (undefined before the hello). */
  modeOf(peer: string): AveragingMode | undefined {
    return this.#modes.get(peer);
  }

  /** The addresses `peer` announced in its last hello. */
  announcedBy(peer: string): string[] | undefined {
    return this.#announced.get(peer);
  }

  /** Whether another member listed `peer` in a hello answer. */
  wasIntroduced(peer: string): boolean {
    return this.#introduced.has(peer);
  }

  /** Whether the connection to `peer` started relayed and was upgraded to a direct one. */
  isUpgraded(peer: string): boolean {
    return this.#upgraded.has(peer);
  }

  /** How this node is connected to `peer`: directly, through a relay, or not at all. */
  pathTo(peer: string): "direct" | "relayed" | undefined {
    const connections = this.#deps.libp2p.getConnections(peerIdFromString(peer));
    if (connections.length === 0) return undefined;
    return connections.some((connection) => !connection.remoteAddr.toString().includes("/p2p-circuit"))
      ? "direct"
      : "relayed";
  }

  /**
   * Calls `listener` with a member each time a hello passes between it and this node (when it
   * connects, and at each member-list refresh); returns the unsubscribe function.
   */
  onGreeted(listener: (peer: string) => void): () => void {
    this.#greetedListeners.add(listener);
    return () => this.#greetedListeners.delete(listener);
  }

  /** Serves the hello: answers with this node's mode, its addresses and the other members it knows. */
  serve(): void {
    this.#deps.rpc.handle(helloMethod, async (incoming) => {
      const peer = incoming.from.peerId;
      try {
        checkModeFitsRole(incoming.head.mode, incoming.from.pass.role, "a hello");
      } catch (error) {
        // A valid pass greeting in a mode not its own: an attempt, gated like another's pass.
        this.#refuseMode(peer, error);
        throw error;
      }
      this.#modes.set(peer, incoming.head.mode);
      this.#announced.set(peer, incoming.head.addrs);
      await incoming.respond({
        mode: this.#deps.mode(),
        addrs: this.#deps.ownAddrs(),
        peers: this.#knownPeers(peer),
      });
      await this.#deps.dialer.learn(peer, incoming.head.addrs);
      this.#greeted(peer);
    });
  }

  /**
   * Says hello to `peer` unless it is a member already (one attempt at a time per peer); true when
   * it is one now. A failed hello hangs up on the peer.
   */
  async hello(peer: string): Promise<boolean> {
    if (this.#deps.authorizer.isAdmitted(peer) && this.#modes.has(peer)) return true;
    const inFlight = this.#helloInFlight.get(peer);
    if (inFlight !== undefined) return inFlight;
    const attempt = (async () => {
      try {
        await this.#exchangeHello(peer);
        this.#greeted(peer);
        return true;
      } catch (error) {
        if (!this.#deps.running()) return false;
        this.#helloFailed(peer, error);
        await this.#deps.libp2p.hangUp(peerIdFromString(peer)).catch(() => undefined);
        return false;
      } finally {
        this.#helloInFlight.delete(peer);
      }
    })();
    this.#helloInFlight.set(peer, attempt);
    return attempt;
  }

  /** Tells every connected member this node's mode and addresses again (after they changed). */
  async announce(): Promise<void> {
    await Promise.all(
      this.members().map(async (peer) => {
        try {
          await this.#exchangeHello(peer);
        } catch (error) {
          this.#deps.logger.debug({ peer, err: error }, "could not tell a member our new addresses");
        }
      }),
    );
  }

  /**
   * `peer` disconnected. Whoever connects next under its PeerId may be another process (an aux
   * restarted with its identity): it knows nothing of this node, so the next connection says hello
   * again.
   */
  disconnected(peer: string): void {
    this.#modes.delete(peer);
  }

  /** Asks a member for the member list at the next maintenance pass, and from then on at the usual pace. */
  refreshSoon(): void {
    this.#refreshWaitMs = MEMBER_REFRESH_MS;
    this.#lastRefresh = 0;
  }

  /** The maintenance pass's part: asks one random member for its member list when one is due. */
  refreshIfDue(now: number): void {
    if (now - this.#lastRefresh < this.#refreshWaitMs) return;
    this.#lastRefresh = now;
    void this.#refreshMembers();
  }

  /** Gates and drops a peer whose hello named a mode its pass's role does not allow. */
  #refuseMode(peer: string, error: unknown): void {
    const reason = error instanceof Error ? error.message : String(error);
    this.#deps.authorizer.deny(peer, reason);
    this.#deps.logger.warn({ peer, reason }, `refused member ${peer}: ${reason}`);
    void this.#deps.libp2p.hangUp(peerIdFromString(peer)).catch(() => undefined);
  }

  /** Tells `peer` this node's mode and addresses, and learns its own and the members it knows. */
  async #exchangeHello(peer: string): Promise<void> {
    const answer = await this.#deps.rpc.request(peer, helloMethod, {
      mode: this.#deps.mode(),
      addrs: this.#deps.ownAddrs(),
    });
    const role = this.#deps.authorizer.passOf(peer)?.role;
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
    await this.#deps.dialer.learn(peer, answer.addrs);
    await this.#learnMembers(answer.peers);
  }

  /**
   * Gates a peer whose hello failed for its pass. A slow or vanished peer may simply retry, and so
   * may one that refused ours (the fault is this node's pass, not that peer's); a pass of a key the
   * authority may have rotated to is gated until this node follows the rotation.
   */
  #helloFailed(peer: string, error: unknown): void {
    const reason = isSwarmError(error) || error instanceof Error ? error.message : String(error);
    this.#deps.logger.info({ peer, reason }, "hello failed; disconnecting");
    const refusedOurs =
      isSwarmError(error, SwarmErrorCode.REMOTE_ERROR) &&
      error.remoteCode !== undefined &&
      isCredentialRefusal(error.remoteCode);
    const transient =
      refusedOurs ||
      isSwarmError(error, SwarmErrorCode.TIMEOUT) ||
      isSwarmError(error, SwarmErrorCode.PEER_UNREACHABLE);
    if (isProtocolError(error) && isKeyRefusal(error.code)) {
      this.#deps.authorizer.denyForKey(peer, reason, UNTRUSTED_KEY_DENY_MS);
    } else if (!transient) this.#deps.authorizer.deny(peer, reason);
  }

  #greeted(peer: string): void {
    this.#logPath(peer);
    this.#deps.greeted(peer);
    for (const listener of this.#greetedListeners) {
      try {
        listener(peer);
      } catch (error) {
        this.#deps.logger.warn({ peer, err: error }, "a hello listener threw");
      }
    }
  }

  /** Logs how `peer` is reached when that changed (a relayed connection upgraded, say). */
  #logPath(peer: string): void {
    const path = this.pathTo(peer);
    const before = this.#paths.get(peer);
    if (path === undefined || before === path) return;
    this.#paths.set(peer, path);
    const upgraded = before === "relayed" && path === "direct";
    if (upgraded) this.#upgraded.add(peer);
    else if (path === "relayed") this.#upgraded.delete(peer);
    const how = upgraded
      ? "directly: the relayed connection was upgraded (hole punched)"
      : path === "direct"
        ? "directly"
        : "through an aux peer's relay";
    this.#deps.logger.info(
      { peer, mode: this.modeOf(peer), path: upgraded ? "upgraded" : path },
      `connected to member ${peer} (${this.modeOf(peer) ?? "unknown mode"}) ${how}`,
    );
  }

  /** Other members and how to reach them: what they announced, else where we reached them. */
  #knownPeers(except: string): Array<{ peerId: string; addrs: string[] }> {
    const result: Array<{ peerId: string; addrs: string[] }> = [];
    for (const peer of this.members()) {
      if (peer === except || result.length >= HELLO_MAX_PEERS) continue;
      const dialed = this.#deps.libp2p
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
    const self = this.#deps.libp2p.peerId.toString();
    let fresh = false;
    for (const member of peers) {
      if (member.peerId === self || member.addrs.length === 0) continue;
      await this.#deps.dialer.learn(member.peerId, member.addrs);
      if (!this.#introduced.has(member.peerId)) fresh = true;
      this.#introduced.add(member.peerId);
    }
    if (fresh) {
      this.#refreshWaitMs = MEMBER_REFRESH_MS;
      this.#deps.maintainSoon();
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
      const answer = await this.#deps.rpc.request(peer, helloMethod, {
        mode: this.#deps.mode(),
        addrs: this.#deps.ownAddrs(),
      });
      await this.#learnMembers(answer.peers);
    } catch (error) {
      this.#deps.logger.debug({ peer, err: error }, "member list refresh failed");
    }
  }
}

/** A pass refused for its signing key: maybe one the authority rotated to and this node has not followed yet. */
function isKeyRefusal(code: string): boolean {
  return code === ProtocolErrorCode.PASS_BAD_SIGNATURE || code === ProtocolErrorCode.PASS_KEY_ROTATED;
}
