import { readJson } from "../../../../../../../src/server/http/json-body.ts";
import { json, route } from "../../../../../../../src/server/http/route.ts";
import { requireUserForMutation } from "../../../../../../../src/server/http/session.ts";
import { sendTestAlert } from "../../../../../../../src/server/services/send-test-alert.ts";
import { sendTestAlertInputSchema } from "../../../../../../../src/api/schemas/alerts.ts";

/** POST /api/v1/experiments/{id}/alerts/test: send a test alert to a webhook or the e-mail recipients now (organizer). */
export const POST = route<{ id: string }>(async ({ req, params, ctx }) => {
  const user = await requireUserForMutation(req, ctx);
  const input = await readJson(req, sendTestAlertInputSchema, 1024);
  return json({ deliveries: await sendTestAlert(ctx, user, params.id, input) });
});
