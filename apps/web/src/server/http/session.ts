import { getToken } from "@auth/core/jwt";
import { AppError, AppErrorCode } from "../app-error.ts";
import type { AppContext } from "../context.ts";
import type { SessionUser } from "../records.ts";

/**
 * The signed-in user of a request, from the Auth.js session cookie (an encrypted JWT), or null for a
 * visitor. The user must still exist: a deleted account's cookie signs nobody in.
 */
export async function readSessionUser(req: Request, ctx: AppContext): Promise<SessionUser | null> {
  // Auth.js names the cookie "__Secure-…" on https; try both names, each needs the secret to open.
  const token =
    (await getToken({ req, secret: ctx.env.authSecret, secureCookie: true })) ??
    (await getToken({ req, secret: ctx.env.authSecret, secureCookie: false }));
  if (token === null || typeof token.sub !== "string") return null;
  return ctx.db.user.findUnique({ where: { id: token.sub }, select: { id: true, username: true } });
}

export async function requireUser(req: Request, ctx: AppContext): Promise<SessionUser> {
  const user = await readSessionUser(req, ctx);
  if (user === null) throw new AppError(AppErrorCode.UNAUTHENTICATED, "sign in first");
  return user;
}

/**
 * Refuses a cookie-authenticated mutation sent from another site. Browsers send `Origin` with every
 * non-GET fetch; together with the JSON content type (which needs a CORS preflight that this API
 * never grants) and Auth.js's SameSite=Lax cookie, this closes cross-site request forgery.
 */
export function assertSameOrigin(req: Request, ctx: AppContext): void {
  const origin = req.headers.get("origin");
  if (origin === null) return;
  const allowed = new Set([new URL(req.url).origin]);
  const host = req.headers.get("x-forwarded-host") ?? req.headers.get("host");
  if (host !== null) {
    const proto = req.headers.get("x-forwarded-proto") ?? new URL(req.url).protocol.replace(":", "");
    allowed.add(`${proto}://${host}`);
  }
  if (ctx.env.publicUrl !== undefined) allowed.add(new URL(ctx.env.publicUrl).origin);
  if (!allowed.has(origin)) {
    throw new AppError(AppErrorCode.CROSS_SITE_REQUEST, `requests from ${origin} are not accepted`);
  }
}

/** A signed-in user making a same-origin mutation: the check every session-authenticated write starts with. */
export async function requireUserForMutation(req: Request, ctx: AppContext): Promise<SessionUser> {
  assertSameOrigin(req, ctx);
  return requireUser(req, ctx);
}
