import { readJson } from "../../../../../../src/server/http/json-body.ts";
import { json, route } from "../../../../../../src/server/http/route.ts";
import { requireUserForMutation } from "../../../../../../src/server/http/session.ts";
import {
  requestToJoin,
  requestToJoinInputSchema,
} from "../../../../../../src/server/services/request-to-join.ts";

/** POST /api/v1/experiments/{id}/join-requests: a volunteer asks the organizer to be allowlisted. */
export const POST = route<{ id: string }>(async ({ req, params, ctx }) => {
  const user = await requireUserForMutation(req, ctx);
  await readJson(req, requestToJoinInputSchema);
  return json(await requestToJoin(ctx, user, params.id), { status: 201 });
});
