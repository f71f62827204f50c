"use client";

import { signIn } from "next-auth/react";
import { useState, type SubmitEvent } from "react";
import { formText } from "./form-text.ts";

export interface SignInOption {
  readonly id: string;
  readonly name: string;
}

export interface SignInFormProps {
  readonly providers: readonly SignInOption[];
  /** Where to go once signed in: a path on this site. */
  readonly redirectTo: string;
  /** A message for an error Auth.js reported by redirecting here. */
  readonly initialError: string | undefined;
}

export function SignInForm({ providers, redirectTo, initialError }: SignInFormProps) {
  const [error, setError] = useState(initialError);
  const [busy, setBusy] = useState<string | null>(null);

  async function submit(event: SubmitEvent<HTMLFormElement>) {
    event.preventDefault();
    const form = new FormData(event.currentTarget);
    const username = formText(form, "username").trim();
    const password = formText(form, "password");
    if (username === "" || password === "") {
      setError("Enter your username and your password.");
      return;
    }
    setBusy("credentials");
    setError(undefined);
    try {
      const result = await signIn("credentials", { redirect: false, username, password });
      if (result.error !== undefined) {
        setError(
          result.error === "CredentialsSignin"
            ? "Wrong username or password."
            : "Signing in failed. Try again in a moment.",
        );
        setBusy(null);
        return;
      }
      // A full page load, so every server-rendered part (the header too) sees the new session.
      window.location.assign(redirectTo);
    } catch {
      setError("The server could not be reached. Check your connection and try again.");
      setBusy(null);
    }
  }

  async function signInWith(id: string) {
    setBusy(id);
    setError(undefined);
    try {
      await signIn(id, { redirectTo });
    } catch {
      setError("The server could not be reached. Check your connection and try again.");
      setBusy(null);
    }
  }

  return (
    <div className="stack">
      <form className="form card" onSubmit={(event) => void submit(event)} noValidate>
        <div className="field">
          <label htmlFor="sign-in-username">Username</label>
          <input
            id="sign-in-username"
            name="username"
            autoComplete="username"
            autoCapitalize="none"
            spellCheck={false}
            required
          />
        </div>
        <div className="field">
          <label htmlFor="sign-in-password">Password</label>
          <input
            id="sign-in-password"
            name="password"
            type="password"
            autoComplete="current-password"
            required
          />
        </div>
        <div className="actions">
          <button type="submit" className="button" disabled={busy !== null}>
            {busy === "credentials" ? "Signing in…" : "Sign in"}
          </button>
        </div>
      </form>

      {providers.length > 0 ? (
        <section aria-labelledby="sign-in-providers" className="card stack">
          <h2 id="sign-in-providers" className="card-title">
            Or use another account
          </h2>
          <ul className="provider-list">
            {providers.map((provider) => (
              <li key={provider.id}>
                <button
                  type="button"
                  className="button button-secondary button-wide"
                  disabled={busy !== null}
                  onClick={() => void signInWith(provider.id)}
                >
                  {busy === provider.id ? `Opening ${provider.name}…` : `Sign in with ${provider.name}`}
                </button>
              </li>
            ))}
          </ul>
        </section>
      ) : null}

      <p role="status" className={error ? "notice notice-error" : "visually-hidden"}>
        {error ?? ""}
      </p>
    </div>
  );
}
