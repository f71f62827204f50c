import { clientIp } from "../../../../../../src/server/http/rate-limit.ts";
import { json, route } from "../../../../../../src/server/http/route.ts";
import { readLeaderboard } from "../../../../../../src/server/services/read-leaderboard.ts";

/** GET /api/v1/experiments/{id}/leaderboard: what each user's nodes contributed. */
export const GET = route<{ id: string }>(async ({ req, params, ctx }) => {
  await ctx.rateLimits.consume("publicRead", clientIp(req));
  return json(await readLeaderboard(ctx, params.id));
});
