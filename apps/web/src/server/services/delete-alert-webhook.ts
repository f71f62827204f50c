import { AppError, AppErrorCode } from "../app-error.ts";
import type { AppContext } from "../context.ts";
import { requireOrganizer } from "./experiment-access.ts";
import type { SessionUser } from "../records.ts";

/** The organizer removes a webhook; its queued deliveries and their log go with it. */
export async function deleteAlertWebhook(
  ctx: AppContext,
  user: SessionUser,
  id: string,
  webhookId: string,
): Promise<void> {
  await requireOrganizer(ctx, id, user);
  const removed = await ctx.db.alertWebhook.deleteMany({ where: { id: webhookId, experimentId: id } });
  if (removed.count === 0) throw new AppError(AppErrorCode.NOT_FOUND, `no webhook ${webhookId} in ${id}`);
  ctx.logger.info({ experimentId: id, webhookId }, "webhook removed");
}
