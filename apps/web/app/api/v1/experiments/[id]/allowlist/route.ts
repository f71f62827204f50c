import { readJson } from "../../../../../../src/server/http/json-body.ts";
import { json, route } from "../../../../../../src/server/http/route.ts";
import { requireUser, requireUserForMutation } from "../../../../../../src/server/http/session.ts";
import { addToAllowlist } from "../../../../../../src/server/services/add-to-allowlist.ts";
import { listAllowlist } from "../../../../../../src/server/services/list-allowlist.ts";
import { addToAllowlistInputSchema } from "../../../../../../src/api/schemas/allowlist.ts";

/** GET /api/v1/experiments/{id}/allowlist: the organizer's list of requests, approvals and bans. */
export const GET = route<{ id: string }>(async ({ req, params, ctx }) => {
  const user = await requireUser(req, ctx);
  return json({ entries: await listAllowlist(ctx, user, params.id) });
});

/** POST /api/v1/experiments/{id}/allowlist: the organizer approves a user by username. */
export const POST = route<{ id: string }>(async ({ req, params, ctx }) => {
  const user = await requireUserForMutation(req, ctx);
  const input = await readJson(req, addToAllowlistInputSchema);
  const { entry, created } = await addToAllowlist(ctx, user, params.id, input);
  return json(entry, { status: created ? 201 : 200 });
});
