import { readJson } from "../../../../../../src/server/http/json-body.ts";
import { json, route } from "../../../../../../src/server/http/route.ts";
import { requireUser, requireUserForMutation } from "../../../../../../src/server/http/session.ts";
import { createPeerToken } from "../../../../../../src/server/services/create-peer-token.ts";
import { listPeerTokens } from "../../../../../../src/server/services/list-peer-tokens.ts";
import { createPeerTokenInputSchema } from "../../../../../../src/api/schemas/tokens.ts";

/** GET /api/v1/experiments/{id}/tokens: the caller's own tokens, without their secrets. */
export const GET = route<{ id: string }>(async ({ req, params, ctx }) => {
  const user = await requireUser(req, ctx);
  return json({ tokens: await listPeerTokens(ctx, user, params.id) });
});

/** POST /api/v1/experiments/{id}/tokens: create a peer token; the secret is in this response only. */
export const POST = route<{ id: string }>(async ({ req, params, ctx }) => {
  const user = await requireUserForMutation(req, ctx);
  const input = await readJson(req, createPeerTokenInputSchema);
  return json(await createPeerToken(ctx, user, params.id, input), { status: 201 });
});
