import type { PauseReason, PeerRole } from "@barnraise/protocol";
import type { AppContext } from "../context.ts";
import { parseAllowlistStatus, parseExperimentStatus } from "./experiment-access.ts";
import { parsePeerRole } from "./list-peer-tokens.ts";
import { peerStatus, swarmViewOf, SWARM_SEEN_WITHIN_MS } from "./peer-status.ts";
import type { SessionUser } from "../records.ts";
import type { PeerNotCountedReason } from "../../api/schemas/nodes.ts";

/** "My nodes": every node the signed-in user runs, in every experiment, and whether it counts. */

export interface NodeView {
  /** The Peer row's id. */
  readonly id: string;
  readonly experimentId: string;
  readonly experimentName: string;
  /** The node's libp2p PeerId. */
  readonly peerId: string;
  readonly role: PeerRole;
  readonly address: string | null;
  readonly tokenLabel: string;
  readonly tokenPrefix: string;
  readonly lastSeenAt: string;
  readonly passExpiresAt: string;
  readonly counted: boolean;
  /** Why the node is not counted; null when it is. */
  readonly reason: PeerNotCountedReason | null;
  /** When an aux peer last reported the swarm accepting the node; null if never. */
  readonly swarmSeenAt: string | null;
  /** The swarm's latest refusal of the node's pass, as an aux reported it; null if none. */
  readonly swarmRefusal: { readonly at: string; readonly code: string; readonly reason: string } | null;
  /** When its owner retired the machine; null while it is not. */
  readonly retiredAt: string | null;
  /** Trainers: why its volunteer's rules hold it, as the swarm last reported; null while it trains. */
  readonly pauseReasons: readonly PauseReason[] | null;
  /**
   * Whether it takes one of its token's places now: a trainer with a live pass, not retired or
   * retired but still in the swarm (see the join's limits of machines per token and per volunteer).
   */
  readonly holdsPlace: boolean;
}

export async function listMyNodes(ctx: AppContext, user: SessionUser): Promise<NodeView[]> {
  const peers = await ctx.db.peer.findMany({
    where: { userId: user.id },
    orderBy: [{ lastSeenAt: "desc" }, { id: "asc" }],
    include: {
      experiment: {
        select: {
          name: true,
          status: true,
          organizerId: true,
          allowlist: { where: { userId: user.id }, select: { status: true } },
        },
      },
      token: { select: { label: true, prefix: true, revokedAt: true } },
    },
  });
  const now = ctx.now();
  return peers.map((peer) => {
    const entry = peer.experiment.allowlist[0];
    const role = parsePeerRole(peer.role);
    const swarm = swarmViewOf(peer);
    const status = peerStatus(
      {
        experimentStatus: parseExperimentStatus(peer.experiment.status),
        role,
        isOrganizer: peer.experiment.organizerId === user.id,
        allowlistStatus: entry === undefined ? null : parseAllowlistStatus(entry.status),
        tokenRevokedAt: peer.token.revokedAt,
        passExpiresAt: peer.passExpiresAt,
        lastSeenAt: peer.lastSeenAt,
        averaging: peer.averaging,
        ...swarm,
        retiredAt: peer.retiredAt,
      },
      now,
    );
    return {
      id: peer.id,
      experimentId: peer.experimentId,
      experimentName: peer.experiment.name,
      peerId: peer.peerId,
      role,
      address: peer.address,
      tokenLabel: peer.token.label,
      tokenPrefix: peer.token.prefix,
      lastSeenAt: peer.lastSeenAt.toISOString(),
      passExpiresAt: peer.passExpiresAt.toISOString(),
      counted: status.counted,
      reason: status.counted ? null : status.reason,
      swarmSeenAt: swarm.swarmSeenAt?.toISOString() ?? null,
      swarmRefusal:
        swarm.swarmRefusal === null
          ? null
          : { ...swarm.swarmRefusal, at: swarm.swarmRefusal.at.toISOString() },
      retiredAt: peer.retiredAt?.toISOString() ?? null,
      pauseReasons: role === "trainer" && swarm.pauseReasons.length > 0 ? swarm.pauseReasons : null,
      holdsPlace:
        role === "trainer" &&
        peer.passExpiresAt.getTime() > now &&
        (peer.retiredAt === null ||
          (peer.swarmSeenAt !== null && now - peer.swarmSeenAt.getTime() < SWARM_SEEN_WITHIN_MS)),
    };
  });
}
