import { readJson } from "../../../../../../src/server/http/json-body.ts";
import { json, route } from "../../../../../../src/server/http/route.ts";
import { requireUser, requireUserForMutation } from "../../../../../../src/server/http/session.ts";
import { readAlertSettings } from "../../../../../../src/server/services/read-alert-settings.ts";
import { updateAlertSettings } from "../../../../../../src/server/services/update-alert-settings.ts";
import { updateAlertSettingsInputSchema } from "../../../../../../src/api/schemas/alerts.ts";

/** GET /api/v1/experiments/{id}/alerts: the run's alert settings, webhooks and recent deliveries (organizer). */
export const GET = route<{ id: string }>(async ({ req, params, ctx }) => {
  const user = await requireUser(req, ctx);
  return json(await readAlertSettings(ctx, user, params.id));
});

/** PUT /api/v1/experiments/{id}/alerts: e-mail recipients and events, and the thresholds (organizer). */
export const PUT = route<{ id: string }>(async ({ req, params, ctx }) => {
  const user = await requireUserForMutation(req, ctx);
  const input = await readJson(req, updateAlertSettingsInputSchema, 16 * 1024);
  return json(await updateAlertSettings(ctx, user, params.id, input));
});
