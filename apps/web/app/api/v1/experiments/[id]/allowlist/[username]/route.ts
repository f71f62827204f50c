import { readJson } from "../../../../../../../src/server/http/json-body.ts";
import { json, route } from "../../../../../../../src/server/http/route.ts";
import { requireUserForMutation } from "../../../../../../../src/server/http/session.ts";
import { removeFromAllowlist } from "../../../../../../../src/server/services/remove-from-allowlist.ts";
import { setAllowlistStatus } from "../../../../../../../src/server/services/set-allowlist-status.ts";
import { setAllowlistStatusInputSchema } from "../../../../../../../src/api/schemas/allowlist.ts";

type Params = { id: string; username: string };

/** PUT /api/v1/experiments/{id}/allowlist/{username}: approve a request, ban, or unban. */
export const PUT = route<Params>(async ({ req, params, ctx }) => {
  const user = await requireUserForMutation(req, ctx);
  const input = await readJson(req, setAllowlistStatusInputSchema);
  return json(await setAllowlistStatus(ctx, user, params.id, params.username, input));
});

/** DELETE /api/v1/experiments/{id}/allowlist/{username}: deny a request or remove from the list. */
export const DELETE = route<Params>(async ({ req, params, ctx }) => {
  const user = await requireUserForMutation(req, ctx);
  await removeFromAllowlist(ctx, user, params.id, params.username);
  return new Response(null, { status: 204, headers: { "cache-control": "no-store" } });
});
