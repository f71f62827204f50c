import { encodePublicKey, PeerRole, type Body, type VerifiedRequest } from "@barnraise/protocol";
import type { z } from "zod";
import { AppError, AppErrorCode } from "../app-error.ts";
import type { AppContext } from "../context.ts";
import { parseInput, readBytes } from "../http/json-body.ts";
import { findExperiment, type ExperimentRecord } from "./experiment-access.ts";

/**
 * Authentication of the routes an aux peer calls (register address, post metrics, upload a
 * checkpoint): a DeDLOC I.5 signed request in `Authorization: Barnraise <signed request>`.
 *
 * The request must be addressed to the experiment's authority key, carry a valid aux pass signed by
 * the current authority key, be signed for exactly this method, path and query, be fresh, and not be
 * a replay. The platform then checks what a pass alone cannot say: that the node's token is still
 * unrevoked and its owner still organizes the experiment, so revoking an aux token cuts the node off
 * at once, even while its pass is valid. A session cookie never authorizes these routes.
 */

export interface AuxCaller {
  readonly experiment: ExperimentRecord;
  readonly verified: VerifiedRequest;
  /** The caller's Peer row. */
  readonly peer: { readonly id: string; readonly peerId: string; readonly userId: string };
}

const AUTHORIZATION_PATTERN = /^Barnraise ([\x21-\x7e]+)$/;

/** The scope a signed request for `req` must carry: `POST /api/v1/experiments/demo/metrics`, query included. */
export function requestScope(req: Request): string {
  const url = new URL(req.url);
  return `${req.method} ${url.pathname}${url.search}`;
}

/**
 * Authenticates an aux peer's signed request to experiment `experimentId`. `body` is the body's
 * bytes, or "verify-later" for a streamed body whose digest the caller checks against
 * `verified.bodySha256` before keeping anything.
 */
export async function authenticateAux(
  ctx: AppContext,
  req: Request,
  experimentId: string,
  body: Body | "verify-later",
): Promise<AuxCaller> {
  const token = signedRequestToken(req);
  const experiment = await findExperiment(ctx, experimentId);
  const verified = await ctx.peerVerifiers.verifierFor(experiment).verify(token, {
    scope: requestScope(req),
    body,
    now: ctx.now(),
    roles: [PeerRole.aux],
  });
  const peer = await ctx.db.peer.findUnique({
    where: {
      experimentId_publicKey: {
        experimentId,
        publicKey: encodePublicKey(verified.pass.peerPublicKey),
      },
    },
    select: {
      id: true,
      peerId: true,
      userId: true,
      role: true,
      token: { select: { revokedAt: true, role: true } },
    },
  });
  if (peer === null || peer.role !== PeerRole.aux || peer.token.role !== PeerRole.aux) {
    throw new AppError(AppErrorCode.FORBIDDEN, "this node has not joined as an aux peer of the experiment");
  }
  if (peer.token.revokedAt !== null) {
    throw new AppError(AppErrorCode.FORBIDDEN, "the token this node joined with was revoked");
  }
  if (peer.userId !== experiment.organizerId) {
    throw new AppError(AppErrorCode.FORBIDDEN, "only the organizer's aux peers may call this");
  }
  return { experiment, verified, peer: { id: peer.id, peerId: peer.peerId, userId: peer.userId } };
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
      "this route needs a signed request from an aux peer: Authorization: Barnraise <signed request>",
    );
  }
  return match[1];
}
