import {
  encodePublicKey,
  issueAccessPass,
  peerIdFromEd25519PublicKey,
  PeerRole,
  signExperimentConfig,
} from "@barnraise/protocol";
import type { JoinRequest, JoinResponse } from "../../api/schemas/peer.ts";
import { AppError, AppErrorCode } from "../app-error.ts";
import { isUniqueViolation } from "@barnraise/prisma";
import { openAuthorityKeyPair } from "../authority-keys.ts";
import type { AppContext } from "../context.ts";
import { findExperiment } from "./experiment-access.ts";
import { parsePeerRole, requireStanding } from "./peer-standing.ts";
import { SWARM_SEEN_WITHIN_MS } from "./peer-status.ts";
import { readAuthorityRotations } from "./read-authority-rotations.ts";
import { hashPeerToken, isWellFormedPeerToken } from "./peer-tokens.ts";
import type { ExperimentRecord } from "../records.ts";
import { storedConfigOf } from "../stored-config.ts";

/**
 * A node joins an experiment with a peer token and its public key (DeDLOC I.5): the platform checks
 * the token and its owner's standing, then returns a short-lived access pass binding the owner's
 * username to the key, the signed config and the addresses of live aux peers. Calling it again with
 * the same token and key is how a node refreshes its pass. The answer lists the latest rotation
 * certificates of the authority key, so a node that trusts an older key (pinned, or running since
 * before a rotation) follows the chain to the current one instead of refusing it.
 *
 * Refusals, in the order they are checked: TOKEN_INVALID (malformed, unknown, or another
 * experiment's token), TOKEN_REVOKED, BANNED, NOT_ALLOWLISTED (trainer tokens: the owner must
 * organize the experiment or be approved), FORBIDDEN (aux tokens: the owner must still organize it),
 * EXPERIMENT_PAUSED (for a node that has not joined before: a known node refreshes its pass while the
 * run is paused), NODE_RETIRED (its owner retired this key), TOO_MANY_NODES (a trainer key that would
 * pass the experiment's limit of machines per token or per volunteer, see `requireFreePlace`), and
 * CONFLICT when another user already registered the key.
 */

/** Aux peers seen this recently are offered as initial peers. */
export const INITIAL_PEER_WINDOW_MS = 10 * 60 * 1000;
export const MAX_INITIAL_PEERS = 16;

export async function joinExperiment(
  ctx: AppContext,
  experimentId: string,
  input: JoinRequest,
): Promise<JoinResponse> {
  return counted(ctx, async () => {
    const experiment = await findExperiment(ctx, experimentId);
    const token = await findPeerToken(ctx, input.token);
    if (token === null || token.experimentId !== experiment.id) {
      throw new AppError(AppErrorCode.TOKEN_INVALID, "the token is not a peer token of this experiment");
    }
    return admitNode(ctx, experiment, token, input);
  });
}

/** Counts a join (or pass refresh) as admitted, or refused with its error code, in the platform's metrics. */
export async function counted(ctx: AppContext, join: () => Promise<JoinResponse>): Promise<JoinResponse> {
  try {
    const response = await join();
    ctx.metrics.joins.inc({ outcome: "admitted", code: "" });
    return response;
  } catch (error) {
    const code = error instanceof AppError ? error.code : "INTERNAL";
    ctx.metrics.joins.inc({ outcome: "refused", code });
    throw error;
  }
}

/**
 * The same join where the token alone names the experiment (`POST /api/v1/join`), so a volunteer
 * needs only the server and the token. Refusals as for `joinExperiment`; an unknown token is
 * TOKEN_INVALID, never NOT_FOUND, so the route tells nothing about which experiments exist.
 */
export async function joinWithToken(ctx: AppContext, input: JoinRequest): Promise<JoinResponse> {
  return counted(ctx, async () => {
    const token = await findPeerToken(ctx, input.token);
    const experiment =
      token === null ? null : await ctx.db.experiment.findUnique({ where: { id: token.experimentId } });
    if (token === null || experiment === null) {
      throw new AppError(AppErrorCode.TOKEN_INVALID, "the token is not a peer token on this platform");
    }
    return admitNode(ctx, experiment, token, input);
  });
}

/** What a join reads of the token it is made on. */
export const PEER_TOKEN_FIELDS = {
  id: true,
  experimentId: true,
  userId: true,
  role: true,
  revokedAt: true,
  user: { select: { username: true } },
} as const;

export type PeerTokenRecord = NonNullable<Awaited<ReturnType<typeof findPeerToken>>>;

/** The token's row, looked up by its hash; null for a malformed or unknown token. */
async function findPeerToken(ctx: AppContext, token: string) {
  if (!isWellFormedPeerToken(token)) return null;
  return ctx.db.peerToken.findUnique({
    where: { tokenHash: hashPeerToken(token) },
    select: PEER_TOKEN_FIELDS,
  });
}

/**
 * Checks the token's standing in `experiment` and issues the pass for the key: the part every join
 * shares (by token, and from a signed-in browser).
 */
export async function admitNode(
  ctx: AppContext,
  experiment: ExperimentRecord,
  token: PeerTokenRecord,
  input: Pick<JoinRequest, "publicKey">,
): Promise<JoinResponse> {
  const role = parsePeerRole(token.role);
  await requireStanding(ctx, experiment, { userId: token.userId, role, revokedAt: token.revokedAt });
  if (experiment.status === "paused" && !(await isKnownNode(ctx, experiment.id, token.userId, input))) {
    throw new AppError(AppErrorCode.EXPERIMENT_PAUSED, "the organizer has paused this experiment");
  }

  const now = ctx.now();
  const publicKey = encodePublicKey(input.publicKey);
  await requireFreePlace(ctx, experiment, { tokenId: token.id, userId: token.userId, role, publicKey }, now);
  const passExpiresAt = now + ctx.env.passTtlMs;
  const authority = openAuthorityKeyPair(experiment, ctx.env.sealingSecrets);
  const pass = issueAccessPass(ctx.crypto, authority, {
    experimentId: experiment.id,
    username: token.user.username,
    role,
    peerPublicKey: input.publicKey,
    grant: token.id,
    issuedAt: now,
    expiresAt: passExpiresAt,
  });
  const signedConfig = signExperimentConfig(ctx.crypto, authority, {
    experimentId: experiment.id,
    version: experiment.configVersion,
    issuedAt: now,
    config: storedConfigOf(experiment),
  });

  await registerPeer(ctx, {
    experimentId: experiment.id,
    userId: token.userId,
    tokenId: token.id,
    publicKey,
    peerId: peerIdFromEd25519PublicKey(input.publicKey).toString(),
    role,
    passExpiresAt: new Date(passExpiresAt),
    lastSeenAt: new Date(now),
  });
  await recordPassIssued(ctx, token.id, now, passExpiresAt);

  return {
    pass,
    passExpiresAt: new Date(passExpiresAt).toISOString(),
    authorityPublicKey: experiment.authorityPublicKey,
    signedConfig,
    initialPeers: await initialPeers(ctx, experiment.id, publicKey, now),
    experiment: { id: experiment.id, name: experiment.name },
    authorityRotations: await readAuthorityRotations(ctx.db, experiment),
  };
}

/**
 * Whether this key may run: not one its owner retired (NODE_RETIRED), and, for a trainer key that is
 * not already running, a place under the experiment's limits (TOO_MANY_NODES): machines with a live
 * pass on this token below `maxNodesPerToken`, and on all of this volunteer's tokens below
 * `maxNodesPerUser`. A running machine refreshing its pass always keeps its place (also when the
 * organizer lowers a limit); a stopped one gives it up when its pass expires, a retired one at once
 * unless it still runs.
 * The organizer's own trainer machines count like anyone's. Two joins at the same instant may both
 * take a last place: the limits bound how many keys one token can bring, they are not a quota.
 */
async function requireFreePlace(
  ctx: AppContext,
  experiment: ExperimentRecord,
  node: { tokenId: string; userId: string; role: PeerRole; publicKey: string },
  now: number,
): Promise<void> {
  const known = await ctx.db.peer.findUnique({
    where: { experimentId_publicKey: { experimentId: experiment.id, publicKey: node.publicKey } },
    select: { retiredAt: true, passExpiresAt: true, tokenId: true, userId: true },
  });
  if (known?.retiredAt != null && known.userId === node.userId) {
    throw new AppError(
      AppErrorCode.NODE_RETIRED,
      "this machine was retired on the volunteer page; to run it again, give it a new identity",
    );
  }
  if (node.role !== PeerRole.trainer) return;
  const running = known !== null && known.passExpiresAt.getTime() > now && known.userId === node.userId;
  if (running && known.tokenId === node.tokenId) return;
  // A retired machine gives its place up at once unless the swarm still has it (an aux reported it
  // within 2 minutes): one that runs on keeps it while its pass is valid, so retiring cannot make
  // room for more keys.
  const live = {
    experimentId: experiment.id,
    role: PeerRole.trainer,
    passExpiresAt: { gt: new Date(now) },
    publicKey: { not: node.publicKey },
    OR: [{ retiredAt: null }, { swarmSeenAt: { gt: new Date(now - SWARM_SEEN_WITHIN_MS) } }],
  };
  const onToken = await ctx.db.peer.count({ where: { ...live, tokenId: node.tokenId } });
  if (onToken >= experiment.maxNodesPerToken) {
    throw new AppError(
      AppErrorCode.TOO_MANY_NODES,
      `this token already runs ${onToken} machines, the most the organizer allows per token; retire one on the volunteer page, or wait until a stopped one's pass expires`,
    );
  }
  if (running) return;
  const ofUser = await ctx.db.peer.count({ where: { ...live, userId: node.userId } });
  if (ofUser >= experiment.maxNodesPerUser) {
    throw new AppError(
      AppErrorCode.TOO_MANY_NODES,
      `you already run ${ofUser} machines in this experiment, the most the organizer allows per volunteer; retire one on the volunteer page, or wait until a stopped one's pass expires`,
    );
  }
}

/**
 * Notes the token's use and how long its passes may live: a revoked token stays in the run control
 * until the last pass issued on it has expired (see read-run-control.ts).
 */
async function recordPassIssued(
  ctx: AppContext,
  tokenId: string,
  now: number,
  passExpiresAt: number,
): Promise<void> {
  const expires = new Date(passExpiresAt);
  await ctx.db.$transaction([
    ctx.db.peerToken.update({ where: { id: tokenId }, data: { lastUsedAt: new Date(now) } }),
    ctx.db.peerToken.updateMany({
      where: { id: tokenId, OR: [{ passesExpireAt: null }, { passesExpireAt: { lt: expires } }] },
      data: { passesExpireAt: expires },
    }),
  ]);
}

/**
 * Whether this user's node with this key joined the experiment before. While the run is paused a
 * known node may still refresh its pass: it waits in the swarm for the organizer to resume (the run
 * control tells it), and its pass must not run out meanwhile. New nodes wait for the resume.
 */
async function isKnownNode(
  ctx: AppContext,
  experimentId: string,
  userId: string,
  input: Pick<JoinRequest, "publicKey">,
): Promise<boolean> {
  const known = await ctx.db.peer.count({
    where: { experimentId, userId, publicKey: encodePublicKey(input.publicKey) },
  });
  return known > 0;
}

interface PeerRegistration {
  experimentId: string;
  userId: string;
  tokenId: string;
  publicKey: string;
  peerId: string;
  role: PeerRole;
  passExpiresAt: Date;
  lastSeenAt: Date;
}

/**
 * Creates or refreshes the node's Peer row. A key belongs to the user who registered it first: the
 * update is conditioned on the owner, so of two users racing for one key, one gets CONFLICT. A node
 * that joins with another token than before leaves the swarm's refusal of its old pass behind.
 */
async function registerPeer(ctx: AppContext, peer: PeerRegistration): Promise<void> {
  const refresh = {
    tokenId: peer.tokenId,
    role: peer.role,
    passExpiresAt: peer.passExpiresAt,
    lastSeenAt: peer.lastSeenAt,
  };
  const ownRow = { experimentId: peer.experimentId, publicKey: peer.publicKey, userId: peer.userId };
  await ctx.db.peer.updateMany({
    where: { ...ownRow, tokenId: { not: peer.tokenId }, swarmRefusedAt: { not: null } },
    data: { swarmRefusedAt: null, swarmRefusalCode: null, swarmRefusal: null },
  });
  const updated = await ctx.db.peer.updateMany({ where: ownRow, data: refresh });
  if (updated.count > 0) return;
  try {
    await ctx.db.peer.create({ data: peer });
    return;
  } catch (error) {
    if (!isUniqueViolation(error)) throw error;
    // Someone registered the key in between: it is ours only if that someone was this user.
    const retried = await ctx.db.peer.updateMany({ where: ownRow, data: refresh });
    if (retried.count > 0) return;
  }
  throw new AppError(AppErrorCode.CONFLICT, "this public key is already registered to another user");
}

/** Multiaddrs of the experiment's aux peers seen in the last 10 minutes, most recent first. */
async function initialPeers(
  ctx: AppContext,
  experimentId: string,
  ownPublicKey: string,
  now: number,
): Promise<string[]> {
  const peers = await ctx.db.peer.findMany({
    where: {
      experimentId,
      role: PeerRole.aux,
      address: { not: null },
      publicKey: { not: ownPublicKey },
      lastSeenAt: { gte: new Date(now - INITIAL_PEER_WINDOW_MS) },
      passExpiresAt: { gt: new Date(now) },
      token: { revokedAt: null },
    },
    orderBy: { lastSeenAt: "desc" },
    take: MAX_INITIAL_PEERS,
    select: { address: true },
  });
  return peers.flatMap((peer) => parsePeerAddresses(peer.address)).slice(0, MAX_INITIAL_PEERS);
}

/** Peer.address holds an aux peer's multiaddrs separated by single spaces (multiaddrs contain none). */
export function parsePeerAddresses(address: string | null): string[] {
  return address === null ? [] : address.split(" ").filter((part) => part.length > 0);
}

export function formatPeerAddresses(multiaddrs: readonly string[]): string {
  return multiaddrs.join(" ");
}
