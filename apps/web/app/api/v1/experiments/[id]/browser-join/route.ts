import { browserJoinRequestSchema } from "../../../../../../src/api/schemas/peer.ts";
import { readJson } from "../../../../../../src/server/http/json-body.ts";
import { clientIp } from "../../../../../../src/server/http/rate-limit.ts";
import { json, route } from "../../../../../../src/server/http/route.ts";
import { requireUserForMutation } from "../../../../../../src/server/http/session.ts";
import { joinFromBrowser } from "../../../../../../src/server/services/join-from-browser.ts";

/**
 * POST /api/v1/experiments/{id}/browser-join: a signed-in volunteer's browser trades its public key
 * for an access pass; the session is the credential.
 */
export const POST = route<{ id: string }>(async ({ req, params, ctx }) => {
  await ctx.rateLimits.consume("join", clientIp(req));
  const user = await requireUserForMutation(req, ctx);
  const input = await readJson(req, browserJoinRequestSchema);
  return json(await joinFromBrowser(ctx, user, params.id, input));
});
