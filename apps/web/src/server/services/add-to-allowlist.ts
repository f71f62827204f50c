import { AppError, AppErrorCode } from "../app-error.ts";
import type { AppContext } from "../context.ts";
import { findUserByUsername, requireOrganizer } from "./experiment-access.ts";
import { toAllowlistEntryView, type AllowlistEntryView } from "./list-allowlist.ts";
import type { SessionUser } from "../records.ts";
import { AllowlistStatus } from "../../api/schemas/allowlist.ts";
import type { AddToAllowlistInput } from "../../api/schemas/allowlist.ts";

/**
 * The organizer allowlists a user by username. An existing entry (a pending request, or a ban)
 * becomes approved; `created` tells the route whether a new entry was made.
 */

export async function addToAllowlist(
  ctx: AppContext,
  organizer: SessionUser,
  id: string,
  input: AddToAllowlistInput,
): Promise<{ entry: AllowlistEntryView; created: boolean }> {
  const experiment = await requireOrganizer(ctx, id, organizer);
  const user = await findUserByUsername(ctx, input.username);
  if (user.id === experiment.organizerId) {
    throw new AppError(AppErrorCode.INVALID_INPUT, "the organizer is always allowed and needs no entry", {
      issues: [{ path: "username", message: "is the organizer" }],
    });
  }
  const key = { experimentId_userId: { experimentId: id, userId: user.id } };
  const existing = await ctx.db.allowlistEntry.findUnique({ where: key, select: { id: true } });
  const entry = await ctx.db.allowlistEntry.upsert({
    where: key,
    create: { experimentId: id, userId: user.id, status: AllowlistStatus.approved },
    update: { status: AllowlistStatus.approved },
    include: { user: { select: { username: true } } },
  });
  ctx.logger.info({ experimentId: id, username: user.username }, "user allowlisted");
  return { entry: toAllowlistEntryView(entry), created: existing === null };
}
