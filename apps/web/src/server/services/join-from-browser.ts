import { encodePublicKey, PeerRole } from "@barnraise/protocol";
import type { BrowserJoinRequest, JoinResponse } from "../../api/schemas/peer.ts";
import type { AppContext } from "../context.ts";
import type { SessionUser } from "../records.ts";
import { findExperiment } from "./experiment-access.ts";
import { admitNode, counted, PEER_TOKEN_FIELDS, type PeerTokenRecord } from "./join-experiment.ts";
import { requireStanding } from "./peer-standing.ts";
import { generatePeerToken } from "./peer-tokens.ts";

/** The label of a browser's token in the volunteer's list of machines. */
export const BROWSER_TOKEN_LABEL = "Browser";

/**
 * A signed-in volunteer's browser tab joins ("Contribute from this browser"): the session is the
 * credential, so there is no token to copy. Each key a browser brings gets a token of its own, made
 * at its first join and never shown (`browser` tokens): it is the tab's entry on the volunteer page,
 * and revoking it there stops that tab as revoking any token stops its machines; the tab's later
 * joins (its pass refreshes) with that key are then TOKEN_REVOKED, and the tab needs a new key.
 * Everything else is a join by token: the same standing (allowlist, ban), pause, limits of machines
 * per volunteer, pass, signed config and initial peers, with the same refusals.
 */
export async function joinFromBrowser(
  ctx: AppContext,
  user: SessionUser,
  experimentId: string,
  input: BrowserJoinRequest,
): Promise<JoinResponse> {
  return counted(ctx, async () => {
    const experiment = await findExperiment(ctx, experimentId);
    const known = await browserTokenOf(ctx, experiment.id, user.id, encodePublicKey(input.publicKey));
    if (known !== null) return admitNode(ctx, experiment, known, input);
    // Refused before a token is made for it: someone who may not train gets no entry at all.
    await requireStanding(ctx, experiment, { userId: user.id, role: PeerRole.trainer, revokedAt: null });
    const secret = generatePeerToken();
    const token = await ctx.db.peerToken.create({
      data: {
        experimentId: experiment.id,
        userId: user.id,
        role: PeerRole.trainer,
        label: BROWSER_TOKEN_LABEL,
        browser: true,
        tokenHash: secret.tokenHash,
        prefix: secret.prefix,
      },
      select: PEER_TOKEN_FIELDS,
    });
    try {
      const joined = await admitNode(ctx, experiment, token, input);
      ctx.logger.info(
        { experimentId: experiment.id, username: user.username, tokenId: token.id },
        "a browser joined",
      );
      return joined;
    } catch (error) {
      // Refused (too many machines, a key of another user): the token was never used.
      await ctx.db.peerToken.delete({ where: { id: token.id } });
      throw error;
    }
  });
}

/** The browser token this user's key joined on before, if any (revoked ones included). */
async function browserTokenOf(
  ctx: AppContext,
  experimentId: string,
  userId: string,
  publicKey: string,
): Promise<PeerTokenRecord | null> {
  const peer = await ctx.db.peer.findUnique({
    where: { experimentId_publicKey: { experimentId, publicKey } },
    select: { userId: true, token: { select: { browser: true, ...PEER_TOKEN_FIELDS } } },
  });
  if (peer === null || peer.userId !== userId || !peer.token.browser) return null;
  return peer.token;
}
