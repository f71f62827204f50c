"use client";

import { usernameSchema } from "@barnraise/protocol";
import { useRouter } from "next/navigation";
import { useState, useTransition, type SubmitEvent } from "react";
import { formText } from "./form-text.ts";
import { callApi, describeFailure } from "./api-client.ts";
import { FieldError } from "./field-error.tsx";
import { formatTime } from "./format.ts";

export interface AllowlistRow {
  readonly username: string;
  readonly status: "pending" | "approved" | "banned";
  readonly createdAt: string;
  readonly updatedAt: string;
}

type Action = "approve" | "deny" | "ban" | "unban" | "remove";

const done: Record<Action, (username: string) => string> = {
  approve: (username) => `${username} is approved and can now create a token.`,
  deny: (username) => `${username}’s request is denied.`,
  ban: (username) => `${username} is banned; their nodes are no longer counted.`,
  unban: (username) => `${username} is no longer banned and is approved again.`,
  remove: (username) => `${username} is removed from the allowlist.`,
};

const groups: readonly { status: AllowlistRow["status"]; title: string; empty: string }[] = [
  { status: "pending", title: "Requests to join", empty: "No requests waiting." },
  { status: "approved", title: "Approved", empty: "Nobody is approved yet." },
  { status: "banned", title: "Banned", empty: "Nobody is banned." },
];

/** The organizer's allowlist: add by username, approve or deny requests, ban and unban. */
export function AllowlistManager({
  experimentId,
  entries,
}: {
  readonly experimentId: string;
  readonly entries: readonly AllowlistRow[];
}) {
  const router = useRouter();
  const [fieldError, setFieldError] = useState<string | undefined>();
  const [status, setStatus] = useState<{ kind: "error" | "ok"; text: string } | null>(null);
  const [busy, setBusy] = useState(false);
  const [refreshing, startRefresh] = useTransition();
  const base = `/api/v1/experiments/${encodeURIComponent(experimentId)}/allowlist`;
  const disabled = busy || refreshing;

  const refresh = () => {
    startRefresh(() => {
      router.refresh();
    });
  };

  async function add(event: SubmitEvent<HTMLFormElement>) {
    event.preventDefault();
    const form = event.currentTarget;
    const username = formText(new FormData(form), "username").trim();
    const valid = usernameSchema.safeParse(username);
    if (!valid.success) {
      setFieldError(
        username === ""
          ? "Enter a username."
          : `A username ${valid.error.issues[0]?.message ?? "is not valid"}.`,
      );
      return;
    }
    setFieldError(undefined);
    setBusy(true);
    setStatus(null);
    const result = await callApi("POST", base, { username });
    setBusy(false);
    if (!result.ok) {
      const message =
        result.code === "NOT_FOUND"
          ? `There is no user named ${username}. They need to create an account first.`
          : result.code === "CONFLICT"
            ? `${username} is already on the list; use the buttons below to change their status.`
            : describeFailure(result);
      setFieldError(message);
      setStatus({ kind: "error", text: message });
      return;
    }
    form.reset();
    setStatus({ kind: "ok", text: `${username} is approved and can now create a token.` });
    refresh();
  }

  async function act(action: Action, username: string) {
    setBusy(true);
    setStatus(null);
    const path = `${base}/${encodeURIComponent(username)}`;
    const result =
      action === "deny" || action === "remove"
        ? await callApi("DELETE", path)
        : await callApi("PUT", path, { status: action === "ban" ? "banned" : "approved" });
    setBusy(false);
    if (!result.ok) {
      setStatus({ kind: "error", text: describeFailure(result) });
      return;
    }
    setStatus({ kind: "ok", text: done[action](username) });
    refresh();
  }

  const button = (action: Action, username: string, label: string, danger = false) => (
    <button
      type="button"
      className={`button button-small ${danger ? "button-danger" : action === "approve" ? "" : "button-quiet"}`}
      disabled={disabled}
      onClick={() => void act(action, username)}
    >
      {label}
      <span className="visually-hidden"> {username}</span>
    </button>
  );

  return (
    <div className="stack">
      <form className="inline-form" onSubmit={(event) => void add(event)} noValidate>
        <div className="field">
          <label htmlFor="allowlist-username">Add a volunteer by username</label>
          <input
            id="allowlist-username"
            name="username"
            autoCapitalize="none"
            spellCheck={false}
            maxLength={64}
            aria-invalid={fieldError ? true : undefined}
            aria-describedby="allowlist-username-error"
          />
        </div>
        <button type="submit" className="button" disabled={disabled}>
          Add to allowlist
        </button>
      </form>
      <FieldError id="allowlist-username-error" message={fieldError} />
      <p role="status" className={status ? `notice notice-${status.kind}` : "visually-hidden"}>
        {status?.text ?? ""}
      </p>

      {groups.map((group) => {
        const rows = entries.filter((entry) => entry.status === group.status);
        return (
          <section key={group.status} aria-labelledby={`allowlist-${group.status}`} className="stack">
            <h3 id={`allowlist-${group.status}`} className="card-title">
              {group.title} <span className="badge">{rows.length}</span>
            </h3>
            {rows.length === 0 ? (
              <p className="muted">{group.empty}</p>
            ) : (
              <ul className="plain-list">
                {rows.map((entry) => (
                  <li key={entry.username} className="row-item" data-testid={`allowlist-${entry.username}`}>
                    <div className="row-item-main">
                      <strong>{entry.username}</strong>
                      <p>
                        {entry.status === "pending" ? "Asked" : "Since"} {formatTime(entry.updatedAt)}
                      </p>
                    </div>
                    <div className="actions">
                      {entry.status === "pending" ? (
                        <>
                          {button("approve", entry.username, "Approve")}
                          {button("deny", entry.username, "Deny")}
                        </>
                      ) : entry.status === "approved" ? (
                        <>
                          {button("ban", entry.username, "Ban", true)}
                          {button("remove", entry.username, "Remove")}
                        </>
                      ) : (
                        <>
                          {button("unban", entry.username, "Unban")}
                          {button("remove", entry.username, "Remove")}
                        </>
                      )}
                    </div>
                  </li>
                ))}
              </ul>
            )}
          </section>
        );
      })}
    </div>
  );
}
