import { MAX_HEARTBEAT_BODY_BYTES, swarmStatusReportSchema } from "../../../../../../src/api/schemas/peer.ts";
import { json, route } from "../../../../../../src/server/http/route.ts";
import { readSignedJson } from "../../../../../../src/server/services/peer-auth.ts";
import { recordSwarmStatus } from "../../../../../../src/server/services/record-swarm-status.ts";

/** POST /api/v1/experiments/{id}/swarm-status (signed aux): the swarm's heartbeat, every 5 s. */
export const POST = route<{ id: string }>(async ({ req, params, ctx }) => {
  const { caller, input } = await readSignedJson(
    ctx,
    req,
    params.id,
    swarmStatusReportSchema,
    MAX_HEARTBEAT_BODY_BYTES,
  );
  return json(await recordSwarmStatus(ctx, caller, input));
});
