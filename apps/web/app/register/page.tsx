import type { Metadata } from "next";
import Link from "next/link";
import { redirect } from "next/navigation";
import { auth } from "../../src/server/auth/auth.ts";
import { getAppContext } from "../../src/server/context.ts";
import { RegisterForm } from "../_components/register-form.tsx";
import { safeRedirectPath } from "../_components/safe-redirect.ts";
import { MAX_PASSWORD_LENGTH, MIN_PASSWORD_LENGTH } from "../../src/api/schemas/accounts.ts";

export const metadata: Metadata = { title: "Create an account" };

export default async function RegisterPage({
  searchParams,
}: {
  readonly searchParams: Promise<Record<string, string | string[] | undefined>>;
}) {
  const params = await searchParams;
  const redirectTo = safeRedirectPath(params.callbackUrl);
  const session = await auth();
  if (session) redirect(redirectTo);
  const signInHref =
    redirectTo === "/" ? "/sign-in" : `/sign-in?callbackUrl=${encodeURIComponent(redirectTo)}`;

  if (getAppContext().env.signup === "closed") {
    return (
      <main className="page page-narrow">
        <h1>Create an account</h1>
        <p className="notice notice-info">
          This platform does not accept new accounts. Ask its administrator for one, or{" "}
          <Link href={signInHref}>sign in</Link> with an account you already have.
        </p>
      </main>
    );
  }

  return (
    <main className="page page-narrow">
      <h1>Create an account</h1>
      <p className="muted">
        With an account you can publish training runs, or ask to join one and lend your computer to it.
      </p>
      <RegisterForm
        minPasswordLength={MIN_PASSWORD_LENGTH}
        maxPasswordLength={MAX_PASSWORD_LENGTH}
        redirectTo={redirectTo}
      />
      <p className="muted">
        Already have an account? <Link href={signInHref}>Sign in</Link>.
      </p>
    </main>
  );
}
