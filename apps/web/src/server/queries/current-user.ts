import { cache } from "react";
import { auth } from "../auth/auth.ts";
import type { AppContext } from "../context.ts";
import type { SessionUser } from "../records.ts";

/**
 * The signed-in user for a page, or null for a visitor. Like the API's `readSessionUser`, the user
 * must still exist: the cookie of a deleted account signs nobody in. Cached per request, so the
 * header and the page share one lookup.
 */
export const currentUser = cache(async (ctx: AppContext): Promise<SessionUser | null> => {
  const session = await auth();
  const id = session?.user.id;
  if (id === undefined || id === "") return null;
  return ctx.db.user.findUnique({ where: { id }, select: { id: true, username: true } });
});
