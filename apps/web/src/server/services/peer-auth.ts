import { encodePublicKey, PeerRole, type Body } from "@barnraise/protocol";
import type { z } from "zod";
import { AppError, AppErrorCode } from "../app-error.ts";
import type { AppContext } from "../context.ts";
import { parseInput, readBytes } from "../http/json-body.ts";
import { findExperiment } from "./experiment-access.ts";
import { parsePeerRole, requireStanding, type NodeStanding } from "./peer-standing.ts";
import type { AuxCaller, PeerCaller } from "../records.ts";

/**
 * Authentication of the routes peer programs call with a DeDLOC I.5 signed request in
 * `Authorization: Barnraise <signed request>`: the aux peer's routes (register address, post
 * metrics, upload a checkpoint, heartbeats, timelines) and the routes any node calls (run control).
 *
 * The request must be addressed to the experiment's authority key, carry a valid pass of an accepted
 * role signed by the current authority key, be signed for exactly this method, path and query, be
 * fresh, and not be a replay. The platform then checks what a pass alone cannot say: that the node
 * joined with that role, that its token is still unrevoked and that its owner is still in good
 * standing, so revoking a token or banning its owner cuts the node off at once, even while its pass
 * is valid. A session cookie never authorizes these routes.
 */

const AUTHORIZATION_PATTERN = /^Barnraise ([\x21-\x7e]+)$/;

/** The scope a signed request for `req` must carry: `POST /api/v1/experiments/demo/metrics`, query included. */
export function requestScope(req: Request): string {
  const url = new URL(req.url);
  return `${req.method} ${url.pathname}${url.search}`;
}

/**
 * Authenticates an aux peer's signed request to experiment `experimentId`. `body` is the body's
 * bytes, or "verify-later" for a streamed body whose digest the caller checks against
 * `verified.bodySha256` before keeping anything. Every refusal after the signature checks is
 * FORBIDDEN: not joined as an aux peer, a revoked token, an owner who no longer organizes the run.
 */
export async function authenticateAux(
  ctx: AppContext,
  req: Request,
  experimentId: string,
  body: Body | "verify-later",
): Promise<AuxCaller> {
  const { caller, standing } = await verifyPeerRequest(ctx, req, experimentId, body, [PeerRole.aux]);
  if (standing.revokedAt !== null) {
    throw new AppError(AppErrorCode.FORBIDDEN, "the token this node joined with was revoked");
  }
  if (standing.userId !== caller.experiment.organizerId) {
    throw new AppError(AppErrorCode.FORBIDDEN, "only the organizer's aux peers may call this");
  }
  return caller;
}

/**
 * Authenticates a signed request from a node of one of `roles`, refused like a join when its owner's
 * standing changed: TOKEN_REVOKED, BANNED, NOT_ALLOWLISTED, FORBIDDEN (see peer-standing.ts). Unlike
 * a join, a paused run does not refuse it.
 */
export async function authenticatePeer(
  ctx: AppContext,
  req: Request,
  experimentId: string,
  body: Body | "verify-later",
  roles: readonly PeerRole[],
): Promise<PeerCaller> {
  const { caller, standing } = await verifyPeerRequest(ctx, req, experimentId, body, roles);
  await requireStanding(ctx, caller.experiment, standing);
  return caller;
}

/** The signature checks and the node's Peer row, shared by both kinds of authentication. */
async function verifyPeerRequest(
  ctx: AppContext,
  req: Request,
  experimentId: string,
  body: Body | "verify-later",
  roles: readonly PeerRole[],
): Promise<{ caller: PeerCaller; standing: NodeStanding }> {
  const token = signedRequestToken(req);
  const experiment = await findExperiment(ctx, experimentId);
  const verified = await (
    await ctx.peerVerifiers.verifierFor(experiment)
  ).verify(token, {
    scope: requestScope(req),
    body,
    now: ctx.now(),
    roles,
  });
  const peer = await ctx.lookups.nodes.load({
    experimentId,
    publicKey: encodePublicKey(verified.pass.peerPublicKey),
  });
  const role = peer === null ? undefined : parsePeerRole(peer.role);
  if (peer === null || role === undefined || !roles.includes(role) || peer.token.role !== role) {
    throw new AppError(
      AppErrorCode.FORBIDDEN,
      `this node has not joined the experiment as ${roles.map((r) => (r === PeerRole.aux ? "an aux peer" : "a trainer")).join(" or ")}`,
    );
  }
  // A machine its owner retired leaves: its control poll is refused, as its pass refresh is.
  if (peer.retiredAt !== null) {
    throw new AppError(AppErrorCode.NODE_RETIRED, "this machine was retired on the volunteer page");
  }
  const revokedAt =
    verified.pass.grant === peer.tokenId
      ? peer.token.revokedAt
      : await revocationOfEarlierGrant(ctx, experimentId, peer.userId, verified.pass.grant);
  return {
    caller: { experiment, verified, peer: { id: peer.id, peerId: peer.peerId, userId: peer.userId, role } },
    standing: { userId: peer.userId, role, revokedAt },
  };
}

/**
 * A pass issued on another token than the one the node last joined with (the node joined again
 * with a new token while a process with the old pass still runs): that token's revocation counts.
 */
async function revocationOfEarlierGrant(
  ctx: AppContext,
  experimentId: string,
  userId: string,
  grant: string,
): Promise<Date | null> {
  const token = await ctx.db.peerToken.findUnique({
    where: { id: grant },
    select: { experimentId: true, userId: true, revokedAt: true },
  });
  if (token === null || token.experimentId !== experimentId || token.userId !== userId) {
    throw new AppError(
      AppErrorCode.FORBIDDEN,
      "the pass was issued on a token this node's owner does not hold",
    );
  }
  return token.revokedAt;
}

/**
 * Reads and authenticates a signed JSON request: the Authorization header must be there before the
 * body is read; the body (at most `maxBytes`) must hash to the signed digest, then parse and satisfy
 * `schema`.
 */
export async function readSignedJson<S extends z.ZodType>(
  ctx: AppContext,
  req: Request,
  experimentId: string,
  schema: S,
  maxBytes: number,
): Promise<{ caller: AuxCaller; input: z.output<S> }> {
  signedRequestToken(req);
  const type = req.headers.get("content-type") ?? "";
  if (!/^application\/json\s*(;|$)/i.test(type)) {
    throw new AppError(AppErrorCode.UNSUPPORTED_MEDIA_TYPE, "the body must be application/json");
  }
  const bytes = await readBytes(req, maxBytes);
  const caller = await authenticateAux(ctx, req, experimentId, bytes);
  let value: unknown;
  try {
    value = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes));
  } catch {
    throw new AppError(AppErrorCode.INVALID_INPUT, "the body is not valid JSON");
  }
  return { caller, input: parseInput(schema, value) };
}

function signedRequestToken(req: Request): string {
  const header = req.headers.get("authorization");
  const match = header === null ? null : AUTHORIZATION_PATTERN.exec(header.trim());
  if (match?.[1] === undefined) {
    throw new AppError(
      AppErrorCode.UNAUTHENTICATED,
      "this route needs a signed request from a node: Authorization: Barnraise <signed request>",
    );
  }
  return match[1];
}
