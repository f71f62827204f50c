import { AppError, AppErrorCode } from "../app-error.ts";
import { deliverNow } from "../alerts/alert-outbox.ts";
import { ALERT_INSTANCE_ID } from "../alerts/alert-worker.ts";
import { enqueueTestAlert, parseAddressList } from "../alerts/enqueue-alert.ts";
import type { AppContext } from "../context.ts";
import { requireOrganizer } from "./experiment-access.ts";
import { toDeliveryView, type AlertDeliveryView } from "./read-alert-settings.ts";
import type { SessionUser } from "../records.ts";
import type { SendTestAlertInput } from "../../api/schemas/alerts.ts";

/**
 * "Send test": a `test` event to one webhook, or to every e-mail recipient, queued in the outbox like
 * any alert and attempted at once, so the answer shows the first attempt's outcome. A failed test is
 * retried like any alert.
 */

export async function sendTestAlert(
  ctx: AppContext,
  user: SessionUser,
  id: string,
  input: SendTestAlertInput,
): Promise<AlertDeliveryView[]> {
  const experiment = await requireOrganizer(ctx, id, user);
  let ids: string[];
  if ("webhookId" in input) {
    const webhook = await ctx.db.alertWebhook.findFirst({
      where: { id: input.webhookId, experimentId: id },
      select: { id: true, url: true },
    });
    if (webhook === null)
      throw new AppError(AppErrorCode.NOT_FOUND, `no webhook ${input.webhookId} in ${id}`);
    ids = await enqueueTestAlert(ctx, ctx.db, experiment, { webhook });
  } else {
    if (ctx.env.smtp === undefined) {
      throw new AppError(
        AppErrorCode.CONFLICT,
        "this platform sends no e-mail: its operator has not set BARNRAISE_SMTP_URL and BARNRAISE_MAIL_FROM",
      );
    }
    const settings = await ctx.db.alertSettings.findUnique({ where: { experimentId: id } });
    const emails = settings === null ? [] : parseAddressList(settings.emailRecipients);
    if (emails.length === 0) throw new AppError(AppErrorCode.CONFLICT, "add an e-mail recipient first");
    ids = await enqueueTestAlert(ctx, ctx.db, experiment, { emails });
  }
  await deliverNow(ctx, ids, ALERT_INSTANCE_ID);
  const rows = await ctx.db.alertDelivery.findMany({
    where: { id: { in: ids } },
    orderBy: { target: "asc" },
  });
  return rows.map(toDeliveryView);
}
