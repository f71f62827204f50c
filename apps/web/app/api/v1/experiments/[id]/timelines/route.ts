import { forkTimelineRequestSchema, MAX_SMALL_BODY_BYTES } from "../../../../../../src/api/schemas/peer.ts";
import { json, route } from "../../../../../../src/server/http/route.ts";
import { forkTimeline } from "../../../../../../src/server/services/fork-timeline.ts";
import { readSignedJson } from "../../../../../../src/server/services/peer-auth.ts";

/** POST /api/v1/experiments/{id}/timelines (signed aux): the swarm restarted from an earlier step. */
export const POST = route<{ id: string }>(async ({ req, params, ctx }) => {
  const { caller, input } = await readSignedJson(
    ctx,
    req,
    params.id,
    forkTimelineRequestSchema,
    MAX_SMALL_BODY_BYTES,
  );
  return json(await forkTimeline(ctx, caller, input));
});
