import { readJson } from "../../../../../../../src/server/http/json-body.ts";
import { json, route } from "../../../../../../../src/server/http/route.ts";
import { requireUserForMutation } from "../../../../../../../src/server/http/session.ts";
import { createAlertWebhook } from "../../../../../../../src/server/services/create-alert-webhook.ts";
import { createAlertWebhookInputSchema } from "../../../../../../../src/api/schemas/alerts.ts";

/** POST /api/v1/experiments/{id}/alerts/webhooks: add a webhook; its secret is in this answer only (organizer). */
export const POST = route<{ id: string }>(async ({ req, params, ctx }) => {
  const user = await requireUserForMutation(req, ctx);
  const input = await readJson(req, createAlertWebhookInputSchema, 8 * 1024);
  return json(await createAlertWebhook(ctx, user, params.id, input), { status: 201 });
});
