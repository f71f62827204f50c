import { registerAddressRequestSchema } from "../../../../../../../src/api/schemas/peer.ts";
import { DEFAULT_MAX_JSON_BYTES } from "../../../../../../../src/server/http/json-body.ts";
import { json, route } from "../../../../../../../src/server/http/route.ts";
import { readSignedJson } from "../../../../../../../src/server/services/peer-auth.ts";
import { registerPeerAddress } from "../../../../../../../src/server/services/register-peer-address.ts";

/** POST /api/v1/experiments/{id}/peers/address (signed aux): where other peers can dial this aux peer. */
export const POST = route<{ id: string }>(async ({ req, params, ctx }) => {
  const { caller, input } = await readSignedJson(
    ctx,
    req,
    params.id,
    registerAddressRequestSchema,
    DEFAULT_MAX_JSON_BYTES,
  );
  return json(await registerPeerAddress(ctx, caller, input));
});
