import { AppError, AppErrorCode } from "../app-error.ts";
import type { AppContext } from "../context.ts";
import { bumpControlVersion, findExperiment } from "./experiment-access.ts";
import type { SessionUser } from "../records.ts";

/**
 * Revokes a peer token: its owner or the experiment's organizer may. Revoking twice is harmless and
 * keeps the first revocation time. Nodes that joined with it stop being counted and cannot refresh
 * their pass, and the run control's version grows: the swarm refuses every pass issued on the token
 * from its next poll (the node itself may join again with another token).
 */
export async function revokePeerToken(
  ctx: AppContext,
  user: SessionUser,
  id: string,
  tokenId: string,
): Promise<void> {
  const experiment = await findExperiment(ctx, id);
  const token = await ctx.db.peerToken.findUnique({
    where: { id: tokenId },
    select: { experimentId: true, userId: true, revokedAt: true },
  });
  if (token === null || token.experimentId !== id) {
    throw new AppError(AppErrorCode.NOT_FOUND, `no token ${tokenId} in experiment ${id}`);
  }
  if (token.userId !== user.id && experiment.organizerId !== user.id) {
    throw new AppError(AppErrorCode.FORBIDDEN, "only the token's owner or the organizer may revoke it");
  }
  if (token.revokedAt !== null) return;
  const now = ctx.now();
  // A join that checked the token just before this commits may still sign a pass (living
  // passTtlMs): the run control lists the token at least that long, from this very version on.
  const horizon = new Date(now + ctx.env.passTtlMs);
  await ctx.db.$transaction([
    ctx.db.peerToken.updateMany({
      where: { id: tokenId, revokedAt: null },
      data: { revokedAt: new Date(now) },
    }),
    ctx.db.peerToken.updateMany({
      where: { id: tokenId, OR: [{ passesExpireAt: null }, { passesExpireAt: { lt: horizon } }] },
      data: { passesExpireAt: horizon },
    }),
    bumpControlVersion(ctx.db, id),
  ]);
  ctx.logger.info({ experimentId: id, tokenId, by: user.username }, "peer token revoked");
}
