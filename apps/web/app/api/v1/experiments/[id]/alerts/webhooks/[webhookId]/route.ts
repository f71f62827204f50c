import { route } from "../../../../../../../../src/server/http/route.ts";
import { requireUserForMutation } from "../../../../../../../../src/server/http/session.ts";
import { deleteAlertWebhook } from "../../../../../../../../src/server/services/delete-alert-webhook.ts";

/** DELETE /api/v1/experiments/{id}/alerts/webhooks/{webhookId}: remove a webhook (organizer). */
export const DELETE = route<{ id: string; webhookId: string }>(async ({ req, params, ctx }) => {
  const user = await requireUserForMutation(req, ctx);
  await deleteAlertWebhook(ctx, user, params.id, params.webhookId);
  return new Response(null, { status: 204 });
});
