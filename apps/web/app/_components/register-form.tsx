"use client";

import { usernameSchema } from "@barnraise/protocol";
import { signIn } from "next-auth/react";
import { useState, type SubmitEvent } from "react";
import { formText } from "./form-text.ts";
import { callApi, describeFailure } from "./api-client.ts";
import { FieldError } from "./field-error.tsx";

export interface RegisterFormProps {
  readonly minPasswordLength: number;
  readonly maxPasswordLength: number;
  readonly redirectTo: string;
}

type Errors = Partial<Record<"username" | "password" | "confirm", string>>;

export function RegisterForm({ minPasswordLength, maxPasswordLength, redirectTo }: RegisterFormProps) {
  const [errors, setErrors] = useState<Errors>({});
  const [status, setStatus] = useState<{ kind: "error" | "info"; text: string } | null>(null);
  const [busy, setBusy] = useState(false);

  async function submit(event: SubmitEvent<HTMLFormElement>) {
    event.preventDefault();
    const form = new FormData(event.currentTarget);
    const username = formText(form, "username").trim();
    const password = formText(form, "password");
    const confirm = formText(form, "confirm");

    const found: Errors = {};
    const name = usernameSchema.safeParse(username);
    if (!name.success) {
      found.username =
        username === ""
          ? "Choose a username."
          : `The username ${name.error.issues[0]?.message ?? "is not valid"}.`;
    }
    if (password.length < minPasswordLength) {
      found.password = `Use at least ${minPasswordLength} characters.`;
    } else if (password.length > maxPasswordLength) {
      found.password = `Use at most ${maxPasswordLength} characters.`;
    }
    if (confirm !== password) found.confirm = "The two passwords differ.";
    setErrors(found);
    if (Object.keys(found).length > 0) {
      setStatus({ kind: "error", text: "Fix the highlighted fields." });
      return;
    }

    setBusy(true);
    setStatus({ kind: "info", text: "Creating your account…" });
    const created = await callApi<{ id: string; username: string }>("POST", "/api/v1/users", {
      username,
      password,
    });
    if (!created.ok) {
      const fieldErrors: Errors = {};
      for (const issue of created.issues) {
        if (issue.path === "username" || issue.path === "password") fieldErrors[issue.path] = issue.message;
      }
      if (created.code === "CONFLICT") fieldErrors.username = "This username is taken. Choose another one.";
      setErrors(fieldErrors);
      setStatus({
        kind: "error",
        text:
          created.code === "SIGNUP_CLOSED"
            ? "This platform does not accept new accounts."
            : created.code === "CONFLICT"
              ? "This username is taken."
              : describeFailure(created),
      });
      setBusy(false);
      return;
    }

    setStatus({ kind: "info", text: "Account created. Signing you in…" });
    try {
      const result = await signIn("credentials", { redirect: false, username, password });
      if (result.error !== undefined) throw new Error(result.error);
      window.location.assign(redirectTo);
    } catch {
      setStatus({
        kind: "error",
        text: "Your account was created, but signing in failed. Sign in from the sign-in page.",
      });
      setBusy(false);
    }
  }

  return (
    <form className="form card" onSubmit={(event) => void submit(event)} noValidate>
      <div className="field">
        <label htmlFor="register-username">Username</label>
        <input
          id="register-username"
          name="username"
          autoComplete="username"
          autoCapitalize="none"
          spellCheck={false}
          maxLength={64}
          aria-invalid={errors.username ? true : undefined}
          aria-describedby="register-username-hint register-username-error"
        />
        <p id="register-username-hint" className="hint">
          Letters, digits, “_”, “.” and “-”. Others see it on leaderboards and allowlists.
        </p>
        <FieldError id="register-username-error" message={errors.username} />
      </div>
      <div className="field">
        <label htmlFor="register-password">Password</label>
        <input
          id="register-password"
          name="password"
          type="password"
          autoComplete="new-password"
          aria-invalid={errors.password ? true : undefined}
          aria-describedby="register-password-hint register-password-error"
        />
        <p id="register-password-hint" className="hint">
          At least {minPasswordLength} characters.
        </p>
        <FieldError id="register-password-error" message={errors.password} />
      </div>
      <div className="field">
        <label htmlFor="register-confirm">Repeat the password</label>
        <input
          id="register-confirm"
          name="confirm"
          type="password"
          autoComplete="new-password"
          aria-invalid={errors.confirm ? true : undefined}
          aria-describedby="register-confirm-error"
        />
        <FieldError id="register-confirm-error" message={errors.confirm} />
      </div>
      <div className="actions">
        <button type="submit" className="button" disabled={busy}>
          {busy ? "Creating account…" : "Create account"}
        </button>
      </div>
      <p role="status" className={status ? `notice notice-${status.kind}` : "visually-hidden"}>
        {status?.text ?? ""}
      </p>
    </form>
  );
}
