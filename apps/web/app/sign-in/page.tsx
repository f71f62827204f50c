import type { Metadata } from "next";
import Link from "next/link";
import { redirect } from "next/navigation";
import { auth, oauthProviders } from "../../src/server/auth/auth.ts";
import { getAppContext } from "../../src/server/context.ts";
import { safeRedirectPath } from "../_components/safe-redirect.ts";
import { SignInForm } from "../_components/sign-in-form.tsx";

export const metadata: Metadata = { title: "Sign in" };

// The codes Auth.js puts in `?error=` when it sends someone back to the sign-in page.
const authErrors: Record<string, string> = {
  CredentialsSignin: "Wrong username or password.",
  AccessDenied: "The sign-in was cancelled or refused by the provider.",
  OAuthSignInError: "The sign-in provider could not be reached. Try again, or use another way to sign in.",
  OAuthCallbackError: "The sign-in at the provider was cancelled or failed. Try again.",
  InvalidCheck: "The sign-in took too long or was started in another tab. Start it again.",
  OAuthAccountNotLinked: "This account is linked to another user.",
  CallbackRouteError: "Signing in failed. Try again, or use another way to sign in.",
  Configuration: "Sign-in is misconfigured on this server. Tell the platform's administrator.",
};

export default async function SignInPage({
  searchParams,
}: {
  readonly searchParams: Promise<Record<string, string | string[] | undefined>>;
}) {
  const params = await searchParams;
  const redirectTo = safeRedirectPath(params.callbackUrl);
  const session = await auth();
  if (session) redirect(redirectTo);

  const ctx = getAppContext();
  const providers = oauthProviders(ctx).map((entry) => entry.info);
  const errorCode = typeof params.error === "string" ? params.error : undefined;
  const initialError =
    errorCode === undefined ? undefined : (authErrors[errorCode] ?? "Signing in failed. Try again.");

  return (
    <main className="page page-narrow">
      <h1>Sign in</h1>
      <SignInForm
        providers={providers.map(({ id, name }) => ({ id, name }))}
        redirectTo={redirectTo}
        initialError={initialError}
      />
      {ctx.env.signup === "open" ? (
        <p className="muted">
          New here?{" "}
          <Link
            href={
              redirectTo === "/" ? "/register" : `/register?callbackUrl=${encodeURIComponent(redirectTo)}`
            }
          >
            Create an account
          </Link>
          .
        </p>
      ) : null}
    </main>
  );
}
