import { joinRequestSchema } from "../../../../src/api/schemas/peer.ts";
import { readJson } from "../../../../src/server/http/json-body.ts";
import { clientIp } from "../../../../src/server/http/rate-limit.ts";
import { json, route } from "../../../../src/server/http/route.ts";
import { joinWithToken } from "../../../../src/server/services/join-experiment.ts";

/**
 * POST /api/v1/join: a node trades a peer token and its public key for an access pass; the token
 * alone names the experiment, so a volunteer needs only the server's address and the token. Shares
 * the per-address rate limit and the response with `POST /api/v1/experiments/{id}/join`.
 */
export const POST = route(async ({ req, ctx }) => {
  await ctx.rateLimits.consume("join", clientIp(req));
  const input = await readJson(req, joinRequestSchema);
  return json(await joinWithToken(ctx, input));
});
