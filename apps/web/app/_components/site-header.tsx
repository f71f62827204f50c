import Link from "next/link";
import { getAppContext } from "../../src/server/context.ts";
import { currentUser } from "../../src/server/queries/current-user.ts";
import { SignOutButton } from "./sign-out-button.tsx";

/** The header on every page: the site's name, the main links and who is signed in. */
export async function SiteHeader() {
  const ctx = getAppContext();
  const username = (await currentUser(ctx))?.username;
  const signupOpen = ctx.env.signup === "open";
  return (
    <header className="site-header">
      <div className="site-header-inner">
        <Link href="/" className="brand">
          Barnraise
        </Link>
        <nav aria-label="Main" className="site-nav">
          <Link href="/#experiments">Experiments</Link>
          {username ? (
            <>
              <Link href="/experiments/new">New experiment</Link>
              <Link href="/me/nodes">My nodes</Link>
            </>
          ) : null}
        </nav>
        <div className="account">
          {username ? (
            <>
              <span className="account-name">
                Signed in as <strong data-testid="signed-in-username">{username}</strong>
              </span>
              <SignOutButton />
            </>
          ) : (
            <>
              <Link href="/sign-in" className="button button-quiet">
                Sign in
              </Link>
              {signupOpen ? (
                <Link href="/register" className="button">
                  Register
                </Link>
              ) : null}
            </>
          )}
        </div>
      </div>
    </header>
  );
}
