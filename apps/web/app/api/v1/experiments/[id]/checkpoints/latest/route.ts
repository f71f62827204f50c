import { clientIp } from "../../../../../../../src/server/http/rate-limit.ts";
import { json, route } from "../../../../../../../src/server/http/route.ts";
import { readLatestCheckpoint } from "../../../../../../../src/server/services/read-latest-checkpoint.ts";

/** GET /api/v1/experiments/{id}/checkpoints/latest: the checkpoint a run resumes from, attested. */
export const GET = route<{ id: string }>(async ({ req, params, ctx }) => {
  await ctx.rateLimits.consume("publicRead", clientIp(req));
  return json(await readLatestCheckpoint(ctx, params.id));
});
