import { MAX_SMALL_BODY_BYTES, validatorFlagRequestSchema } from "../../../../../../src/api/schemas/peer.ts";
import { json, route } from "../../../../../../src/server/http/route.ts";
import { requireUser } from "../../../../../../src/server/http/session.ts";
import { listValidatorFlags } from "../../../../../../src/server/services/list-validator-flags.ts";
import { readSignedJson } from "../../../../../../src/server/services/peer-auth.ts";
import { recordValidatorFlag } from "../../../../../../src/server/services/record-validator-flag.ts";

/** GET /api/v1/experiments/{id}/validator-flags: the organizer's list of flagged trainer nodes. */
export const GET = route<{ id: string }>(async ({ req, params, ctx }) => {
  const user = await requireUser(req, ctx);
  return json({ flags: await listValidatorFlags(ctx, user, params.id) });
});

/**
 * POST /api/v1/experiments/{id}/validator-flags (signed aux): the validator found a trainer's
 * contributions raising the held-out loss; the body is its evidence → the node's flag.
 */
export const POST = route<{ id: string }>(async ({ req, params, ctx }) => {
  const { caller, input } = await readSignedJson(
    ctx,
    req,
    params.id,
    validatorFlagRequestSchema,
    MAX_SMALL_BODY_BYTES,
  );
  return json(await recordValidatorFlag(ctx, caller, input));
});
