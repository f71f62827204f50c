import { clientIp } from "../../../../../../../../../src/server/http/rate-limit.ts";
import { route } from "../../../../../../../../../src/server/http/route.ts";
import {
  readCheckpointTfjs,
  tfjsModelJsonResponse,
} from "../../../../../../../../../src/server/services/read-checkpoint-tfjs.ts";

/**
 * GET /api/v1/experiments/{id}/checkpoints/{checkpointId}/tfjs/model.json: the checkpoint as a
 * TF.js Layers model's model.json, whose weights manifest names `weights.bin` beside it, so
 * `tf.loadLayersModel` on this URL loads the checkpoint's weights.
 */
export const GET = route<{ id: string; checkpointId: string }>(async ({ req, params, ctx }) => {
  await ctx.rateLimits.consume("publicRead", clientIp(req));
  return tfjsModelJsonResponse(req, await readCheckpointTfjs(ctx, params.id, params.checkpointId));
});
