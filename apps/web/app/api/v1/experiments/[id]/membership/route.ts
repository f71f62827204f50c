import { json, route } from "../../../../../../src/server/http/route.ts";
import { requireUser } from "../../../../../../src/server/http/session.ts";
import { readMembership } from "../../../../../../src/server/services/read-membership.ts";

/** GET /api/v1/experiments/{id}/membership: what the signed-in user is to the experiment. */
export const GET = route<{ id: string }>(async ({ req, params, ctx }) => {
  const user = await requireUser(req, ctx);
  return json(await readMembership(ctx, user, params.id));
});
