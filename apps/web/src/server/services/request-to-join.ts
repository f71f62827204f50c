import { z } from "zod";
import { AppError, AppErrorCode } from "../app-error.ts";
import { isUniqueViolation } from "@barnraise/prisma";
import { enqueueAlert } from "../alerts/enqueue-alert.ts";
import type { AppContext } from "../context.ts";
import { findExperiment, membershipOf } from "./experiment-access.ts";
import { toAllowlistEntryView, type AllowlistEntryView } from "./list-allowlist.ts";
import type { SessionUser } from "../records.ts";
import { AlertEventType } from "../../api/schemas/alerts.ts";
import { AllowlistStatus } from "../../api/schemas/allowlist.ts";

/**
 * A volunteer asks to join; the organizer sees a pending entry to approve or deny, and the
 * "join requested" alert goes out with it.
 */

export const requestToJoinInputSchema = z.strictObject({});

export async function requestToJoin(
  ctx: AppContext,
  user: SessionUser,
  id: string,
): Promise<AllowlistEntryView> {
  const experiment = await findExperiment(ctx, id);
  const membership = await membershipOf(ctx, experiment, user.id);
  switch (membership) {
    case "organizer":
      throw new AppError(AppErrorCode.CONFLICT, "you organize this experiment; you need no request");
    case "banned":
      throw new AppError(AppErrorCode.BANNED, "you are banned from this experiment");
    case "pending":
      throw new AppError(AppErrorCode.CONFLICT, "you have already asked to join; the organizer will decide");
    case "approved":
      throw new AppError(AppErrorCode.CONFLICT, "you are already on the allowlist");
    case "none":
      break;
  }
  try {
    const entry = await ctx.db.$transaction(async (tx) => {
      const created = await tx.allowlistEntry.create({
        data: { experimentId: id, userId: user.id, status: AllowlistStatus.pending },
        include: { user: { select: { username: true } } },
      });
      await enqueueAlert(ctx, tx, experiment, {
        type: AlertEventType.joinRequested,
        summary: `${user.username} asked to join ${experiment.name}`,
        details: { username: user.username },
      });
      return created;
    });
    ctx.logger.info({ experimentId: id, username: user.username }, "join requested");
    return toAllowlistEntryView(entry);
  } catch (error) {
    // A concurrent request, or the organizer listing the user at the same moment.
    if (!isUniqueViolation(error)) throw error;
    throw new AppError(AppErrorCode.CONFLICT, "you are already on the allowlist");
  }
}
