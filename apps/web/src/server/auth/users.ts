import { isUniqueViolation } from "@barnraise/prisma";
import { usernameSchema } from "@barnraise/protocol";
import type { AppContext } from "../context.ts";
import { dummyPasswordHash, verifyPassword } from "./passwords.ts";

/** How sign-in turns credentials or an OIDC identity into a Barnraise user. */

export interface SignedInUser {
  readonly id: string;
  readonly username: string;
}

/** The user whose username and password these are, or null. Takes the same time when the user does not exist. */
export async function authorizeCredentials(
  ctx: AppContext,
  username: string,
  password: string,
): Promise<SignedInUser | null> {
  const user = await ctx.db.user.findUnique({ where: { username } });
  const ok = await verifyPassword(password, user?.passwordHash ?? (await dummyPasswordHash()));
  if (user === null || user.passwordHash === null || !ok) return null;
  return { id: user.id, username: user.username };
}

export interface OidcProfile {
  readonly preferred_username?: unknown;
  readonly login?: unknown;
  readonly nickname?: unknown;
  readonly name?: unknown;
  readonly email?: unknown;
}

/** The user linked to this OIDC identity; on first sign-in, a new user with a username taken from the profile. */
export async function userForOidcAccount(
  ctx: AppContext,
  provider: string,
  providerAccountId: string,
  profile: OidcProfile,
): Promise<SignedInUser> {
  const linked = await ctx.db.account.findUnique({
    where: { provider_providerAccountId: { provider, providerAccountId } },
    include: { user: true },
  });
  if (linked !== null) return { id: linked.user.id, username: linked.user.username };

  const base = usernameBase(profile);
  const name = typeof profile.name === "string" ? profile.name.slice(0, 128) : null;
  for (let attempt = 0; attempt < 20; attempt++) {
    const username =
      attempt === 0 ? base : `${base}-${attempt < 10 ? attempt + 1 : crypto.randomUUID().slice(0, 8)}`;
    try {
      const user = await ctx.db.user.create({
        data: { username, name, accounts: { create: { provider, providerAccountId } } },
      });
      ctx.logger.info({ provider, username }, "created user from OIDC sign-in");
      return { id: user.id, username: user.username };
    } catch (error) {
      if (!isUniqueViolation(error)) throw error;
      // The account may have been linked by a concurrent sign-in; otherwise the username is taken.
      const raced = await ctx.db.account.findUnique({
        where: { provider_providerAccountId: { provider, providerAccountId } },
        include: { user: true },
      });
      if (raced !== null) return { id: raced.user.id, username: raced.user.username };
    }
  }
  throw new Error("could not find a free username for this account");
}

function usernameBase(profile: OidcProfile): string {
  const email = typeof profile.email === "string" ? profile.email.split("@")[0] : undefined;
  for (const candidate of [
    profile.preferred_username,
    profile.login,
    profile.nickname,
    email,
    profile.name,
  ]) {
    if (typeof candidate !== "string") continue;
    const cleaned = candidate
      .replace(/[^A-Za-z0-9_.-]+/g, "-")
      .replace(/^[-.]+|[-.]+$/g, "")
      .slice(0, 48);
    if (usernameSchema.safeParse(cleaned).success) return cleaned;
  }
  return "user";
}
