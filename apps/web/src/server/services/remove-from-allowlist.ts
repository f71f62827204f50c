import { AppError, AppErrorCode } from "../app-error.ts";
import type { AppContext } from "../context.ts";
import { bumpControlVersion, findUserByUsername, requireOrganizer } from "./experiment-access.ts";
import type { SessionUser } from "../records.ts";

/**
 * The organizer denies a join request or takes a user off the list. Removing a ban lets the user ask
 * again; to keep someone out, ban them instead. The run control's version grows: the user's passes
 * are revoked until they are approved again.
 */
export async function removeFromAllowlist(
  ctx: AppContext,
  organizer: SessionUser,
  id: string,
  username: string,
): Promise<void> {
  const experiment = await requireOrganizer(ctx, id, organizer);
  const user = await findUserByUsername(ctx, username);
  if (user.id === experiment.organizerId) {
    throw new AppError(AppErrorCode.INVALID_INPUT, "the organizer is always allowed and has no entry");
  }
  await ctx.db.$transaction(async (tx) => {
    const { count } = await tx.allowlistEntry.deleteMany({ where: { experimentId: id, userId: user.id } });
    if (count === 0) throw new AppError(AppErrorCode.NOT_FOUND, `${username} is not on the allowlist`);
    await bumpControlVersion(tx, id);
  });
  ctx.logger.info({ experimentId: id, username }, "removed from allowlist");
}
