import { clientIp } from "../../../../../../../../../src/server/http/rate-limit.ts";
import { route } from "../../../../../../../../../src/server/http/route.ts";
import {
  readCheckpointTfjs,
  tfjsWeightsResponse,
} from "../../../../../../../../../src/server/services/read-checkpoint-tfjs.ts";

/**
 * GET /api/v1/experiments/{id}/checkpoints/{checkpointId}/tfjs/weights.bin: the weights that the
 * checkpoint's TF.js model.json lists, float32 in manifest order, streamed (single ranges too).
 */
export const GET = route<{ id: string; checkpointId: string }>(async ({ req, params, ctx }) => {
  await ctx.rateLimits.consume("publicRead", clientIp(req));
  return tfjsWeightsResponse(req, await readCheckpointTfjs(ctx, params.id, params.checkpointId));
});
