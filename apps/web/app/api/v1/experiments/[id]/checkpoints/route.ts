import { clientIp } from "../../../../../../src/server/http/rate-limit.ts";
import { json, route } from "../../../../../../src/server/http/route.ts";
import { listCheckpoints } from "../../../../../../src/server/services/list-checkpoints.ts";
import { uploadCheckpoint } from "../../../../../../src/server/services/upload-checkpoint.ts";

/** GET /api/v1/experiments/{id}/checkpoints: the checkpoints, newest step first. */
export const GET = route<{ id: string }>(async ({ req, params, ctx }) => {
  await ctx.rateLimits.consume("publicRead", clientIp(req));
  return json(await listCheckpoints(ctx, params.id));
});

/** POST /api/v1/experiments/{id}/checkpoints?step=&loss=&sizeBytes= (signed aux): the file, streamed. */
export const POST = route<{ id: string }>(async ({ req, params, ctx }) => {
  const checkpoint = await uploadCheckpoint(ctx, req, params.id);
  ctx.metrics.uploads.inc({ kind: "checkpoint" });
  ctx.metrics.uploadBytes.inc({ kind: "checkpoint" }, checkpoint.sizeBytes);
  return json(checkpoint, { status: 201 });
});
