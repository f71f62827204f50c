import NextAuth, { type DefaultSession, type NextAuthConfig, type User } from "next-auth";
import type { Provider } from "next-auth/providers";
import Credentials from "next-auth/providers/credentials";
import GitHub from "next-auth/providers/github";
import { z } from "zod";
import { getAppContext, type AppContext } from "../context.ts";
import { authorizeCredentials, userForOidcAccount } from "./users.ts";
import { MAX_PASSWORD_LENGTH } from "../../api/schemas/accounts.ts";

declare module "next-auth" {
  interface Session {
    user: { id: string; username: string } & DefaultSession["user"];
  }
}

const credentialsSchema = z.object({
  username: z.string().min(1).max(64),
  password: z.string().min(1).max(MAX_PASSWORD_LENGTH),
});

/** A sign-in option shown on the sign-in page. */
export interface SignInProvider {
  readonly id: string;
  readonly name: string;
}

/** The OIDC/OAuth providers configured in the environment, in the order the sign-in page shows them. */
export function oauthProviders(ctx: AppContext): { provider: Provider; info: SignInProvider }[] {
  const list: { provider: Provider; info: SignInProvider }[] = [];
  const { github, huggingFace, oidcProviders } = ctx.env;
  if (github !== undefined) {
    list.push({ provider: GitHub(github), info: { id: "github", name: "GitHub" } });
  }
  if (huggingFace !== undefined) {
    list.push({
      provider: {
        id: "huggingface",
        name: "Hugging Face",
        type: "oidc",
        issuer: "https://huggingface.co",
        ...huggingFace,
      },
      info: { id: "huggingface", name: "Hugging Face" },
    });
  }
  for (const oidc of oidcProviders) {
    list.push({
      provider: {
        id: oidc.id,
        name: oidc.name,
        type: "oidc",
        issuer: oidc.issuer,
        clientId: oidc.clientId,
        clientSecret: oidc.clientSecret,
      },
      info: { id: oidc.id, name: oidc.name },
    });
  }
  return list;
}

export function authConfig(ctx: AppContext): NextAuthConfig {
  return {
    secret: ctx.env.authSecret,
    trustHost: true,
    session: { strategy: "jwt" },
    pages: { signIn: "/sign-in" },
    logger: {
      error: (error) => {
        ctx.logger.error({ err: error }, "auth error");
      },
      warn: (code) => {
        ctx.logger.warn({ code }, "auth warning");
      },
      debug: () => undefined,
    },
    providers: [
      Credentials({
        id: "credentials",
        name: "Username and password",
        credentials: { username: { label: "Username" }, password: { label: "Password", type: "password" } },
        authorize: async (raw) => {
          const parsed = credentialsSchema.safeParse(raw);
          if (!parsed.success) return null;
          const user = await authorizeCredentials(ctx, parsed.data.username, parsed.data.password);
          return user === null ? null : { id: user.id, name: user.username };
        },
      }),
      ...oauthProviders(ctx).map((entry) => entry.provider),
    ],
    callbacks: {
      jwt: async ({ token, user, account, profile }) => {
        if (account && account.type !== "credentials") {
          const linked = await userForOidcAccount(
            ctx,
            account.provider,
            account.providerAccountId,
            profile ?? {},
          );
          token.sub = linked.id;
          token.username = linked.username;
        } else {
          // Auth.js passes `user` only on sign-in, although its type says it is always there.
          const signedIn = user as User | undefined;
          if (signedIn?.id !== undefined) {
            token.sub = signedIn.id;
            token.username = signedIn.name;
          }
        }
        return token;
      },
      session: ({ session, token }) => {
        session.user.id = token.sub ?? "";
        session.user.username = typeof token.username === "string" ? token.username : "";
        return session;
      },
    },
  };
}

export const { handlers, auth, signIn, signOut } = NextAuth(() => authConfig(getAppContext()));
