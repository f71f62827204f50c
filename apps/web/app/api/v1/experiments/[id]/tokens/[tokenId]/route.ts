import { route } from "../../../../../../../src/server/http/route.ts";
import { requireUserForMutation } from "../../../../../../../src/server/http/session.ts";
import { revokePeerToken } from "../../../../../../../src/server/services/revoke-peer-token.ts";

/** DELETE /api/v1/experiments/{id}/tokens/{tokenId}: revoke a token (its owner or the organizer). */
export const DELETE = route<{ id: string; tokenId: string }>(async ({ req, params, ctx }) => {
  const user = await requireUserForMutation(req, ctx);
  await revokePeerToken(ctx, user, params.id, params.tokenId);
  return new Response(null, { status: 204, headers: { "cache-control": "no-store" } });
});
