import { objectResponse } from "../../../../../../../src/server/http/byte-range.ts";
import { clientIp } from "../../../../../../../src/server/http/rate-limit.ts";
import { route } from "../../../../../../../src/server/http/route.ts";
import { readCheckpointFile } from "../../../../../../../src/server/services/read-checkpoint-file.ts";

/** GET /api/v1/experiments/{id}/checkpoints/{checkpointId}: the file, with single-range support. */
export const GET = route<{ id: string; checkpointId: string }>(async ({ req, params, ctx }) => {
  await ctx.rateLimits.consume("publicRead", clientIp(req));
  return objectResponse(req, await readCheckpointFile(ctx, params.id, params.checkpointId));
});
