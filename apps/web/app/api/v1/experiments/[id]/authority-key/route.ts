import { readJson } from "../../../../../../src/server/http/json-body.ts";
import { json, route } from "../../../../../../src/server/http/route.ts";
import { requireUserForMutation } from "../../../../../../src/server/http/session.ts";
import { rotateAuthorityKey } from "../../../../../../src/server/services/rotate-authority-key.ts";
import { rotateAuthorityKeyInputSchema } from "../../../../../../src/api/schemas/experiments.ts";

/** POST /api/v1/experiments/{id}/authority-key: the organizer rotates the authority key pair. */
export const POST = route<{ id: string }>(async ({ req, params, ctx }) => {
  const user = await requireUserForMutation(req, ctx);
  await readJson(req, rotateAuthorityKeyInputSchema);
  return json(await rotateAuthorityKey(ctx, user, params.id));
});
