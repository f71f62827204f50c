import { joinRequestSchema } from "../../../../../../src/api/schemas/peer.ts";
import { readJson } from "../../../../../../src/server/http/json-body.ts";
import { clientIp } from "../../../../../../src/server/http/rate-limit.ts";
import { json, route } from "../../../../../../src/server/http/route.ts";
import { joinExperiment } from "../../../../../../src/server/services/join-experiment.ts";

/** POST /api/v1/experiments/{id}/join: a node trades a peer token and its public key for an access pass. */
export const POST = route<{ id: string }>(async ({ req, params, ctx }) => {
  await ctx.rateLimits.consume("join", clientIp(req));
  const input = await readJson(req, joinRequestSchema);
  return json(await joinExperiment(ctx, params.id, input));
});
