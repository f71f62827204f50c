import { readJson } from "../../../../../src/server/http/json-body.ts";
import { json, route } from "../../../../../src/server/http/route.ts";
import { requireUser, requireUserForMutation } from "../../../../../src/server/http/session.ts";
import { readNodeAlerts, setNodeAlerts } from "../../../../../src/server/services/node-alerts.ts";
import { setNodeAlertsInputSchema } from "../../../../../src/api/schemas/alerts.ts";

/** GET /api/v1/me/alerts: whether the signed-in user gets an e-mail when one of their nodes stops counting. */
export const GET = route(async ({ req, ctx }) => {
  const user = await requireUser(req, ctx);
  return json(await readNodeAlerts(ctx, user));
});

/** PUT /api/v1/me/alerts: `{ email }` turns those e-mails on (to that address) or off (null). */
export const PUT = route(async ({ req, ctx }) => {
  const user = await requireUserForMutation(req, ctx);
  const input = await readJson(req, setNodeAlertsInputSchema, 1024);
  return json(await setNodeAlerts(ctx, user, input));
});
