import { prefixedObjectResponse } from "../../../../../../../../src/server/http/byte-range.ts";
import { clientIp } from "../../../../../../../../src/server/http/rate-limit.ts";
import { route } from "../../../../../../../../src/server/http/route.ts";
import { readCheckpointSafetensors } from "../../../../../../../../src/server/services/read-checkpoint-safetensors.ts";

/**
 * GET /api/v1/experiments/{id}/checkpoints/{checkpointId}/safetensors: the checkpoint's model
 * weights as a safetensors file, one named float32 tensor per parameter tensor.
 */
export const GET = route<{ id: string; checkpointId: string }>(async ({ req, params, ctx }) => {
  await ctx.rateLimits.consume("publicRead", clientIp(req));
  const exported = await readCheckpointSafetensors(ctx, params.id, params.checkpointId);
  return prefixedObjectResponse({
    ...exported,
    storage: ctx.storage,
    contentType: "application/octet-stream",
    cacheControl: "public, max-age=31536000, immutable",
  });
});
