import { AppError, AppErrorCode } from "../app-error.ts";
import type { AppContext } from "../context.ts";
import { bumpControlVersion, findUserByUsername, requireOrganizer } from "./experiment-access.ts";
import { toAllowlistEntryView, type AllowlistEntryView } from "./list-allowlist.ts";
import type { SessionUser } from "../records.ts";
import type { SetAllowlistStatusInput } from "../../api/schemas/allowlist.ts";

/**
 * The organizer approves a join request, bans a user, or lifts a ban (creating the entry if needed).
 * The run control's version grows, so the swarm learns of it (a ban revokes the user's passes).
 */

export async function setAllowlistStatus(
  ctx: AppContext,
  organizer: SessionUser,
  id: string,
  username: string,
  input: SetAllowlistStatusInput,
): Promise<AllowlistEntryView> {
  const experiment = await requireOrganizer(ctx, id, organizer);
  const user = await findUserByUsername(ctx, username);
  if (user.id === experiment.organizerId) {
    throw new AppError(
      AppErrorCode.INVALID_INPUT,
      "the organizer is always allowed and cannot be banned or listed",
    );
  }
  const [entry] = await ctx.db.$transaction([
    ctx.db.allowlistEntry.upsert({
      where: { experimentId_userId: { experimentId: id, userId: user.id } },
      create: { experimentId: id, userId: user.id, status: input.status },
      update: { status: input.status },
      include: { user: { select: { username: true } } },
    }),
    bumpControlVersion(ctx.db, id),
  ]);
  ctx.logger.info({ experimentId: id, username, status: input.status }, "allowlist status set");
  return toAllowlistEntryView(entry);
}
