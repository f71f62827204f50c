import { json, route } from "../../../../../../../src/server/http/route.ts";
import { requireUserForMutation } from "../../../../../../../src/server/http/session.ts";
import { retireNode } from "../../../../../../../src/server/services/retire-node.ts";

/** POST /api/v1/me/nodes/{nodeId}/retire: the signed-in user retires one of their machines. */
export const POST = route<{ nodeId: string }>(async ({ req, params, ctx }) => {
  const user = await requireUserForMutation(req, ctx);
  return json(await retireNode(ctx, user, params.nodeId));
});
