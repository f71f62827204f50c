import { PeerRole } from "@barnraise/protocol";
import { json, route } from "../../../../../../src/server/http/route.ts";
import { authenticatePeer } from "../../../../../../src/server/services/peer-auth.ts";
import { readRunControl } from "../../../../../../src/server/services/read-run-control.ts";

/** GET /api/v1/experiments/{id}/control (signed, trainer or aux): the run control, signed now. */
export const GET = route<{ id: string }>(async ({ req, params, ctx }) => {
  const caller = await authenticatePeer(ctx, req, params.id, new Uint8Array(0), [
    PeerRole.trainer,
    PeerRole.aux,
  ]);
  return json(await readRunControl(ctx, caller));
});
