import { json, route } from "../../../../../src/server/http/route.ts";
import { requireUser } from "../../../../../src/server/http/session.ts";
import { listMyNodes } from "../../../../../src/server/services/list-my-nodes.ts";

/** GET /api/v1/me/nodes: the signed-in user's nodes in every experiment, counted or not and why. */
export const GET = route(async ({ req, ctx }) => {
  const user = await requireUser(req, ctx);
  return json({ nodes: await listMyNodes(ctx, user) });
});
