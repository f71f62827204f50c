"use client";

import { useRouter } from "next/navigation";
import { useState, useTransition, type SubmitEvent } from "react";
import { installCommand, runCommand, type ProgramLink } from "../../src/server/programs/program-command.ts";
import { formText } from "./form-text.ts";
import { callApi, describeFailure } from "./api-client.ts";
import { CopyBox } from "./copy-box.tsx";
import { formatTime } from "./format.ts";

export interface TokenRow {
  readonly id: string;
  readonly label: string;
  readonly prefix: string;
  readonly createdAt: string;
  readonly lastUsedAt: string | null;
  readonly revokedAt: string | null;
}

export interface TokenPanelProps {
  readonly experimentId: string;
  readonly role: "trainer" | "aux";
  /** The platform's public URL, for the command. */
  readonly origin: string;
  /** Where the platform serves the program; undefined when it has none built (the bare name is shown). */
  readonly program: ProgramLink | undefined;
  /** The caller's tokens of this role, newest first. */
  readonly tokens: readonly TokenRow[];
}

const programs = { trainer: "barnraise-peer", aux: "barnraise-aux" } as const;

/** Create a peer or aux token (its secret shown once, with the command to run), list and revoke them. */
export function TokenPanel({ experimentId, role, origin, program: link, tokens }: TokenPanelProps) {
  const router = useRouter();
  const [created, setCreated] = useState<{ id: string; token: string } | null>(null);
  const [status, setStatus] = useState<{ kind: "error" | "ok"; text: string } | null>(null);
  const [busy, setBusy] = useState(false);
  const [confirming, setConfirming] = useState<string | null>(null);
  const [refreshing, startRefresh] = useTransition();
  const tokensPath = `/api/v1/experiments/${encodeURIComponent(experimentId)}/tokens`;
  const noun = role === "aux" ? "aux token" : "token";
  const aNoun = role === "aux" ? "an aux token" : "a token";
  const program = programs[role];

  const refresh = () => {
    startRefresh(() => {
      router.refresh();
    });
  };

  async function create(event: SubmitEvent<HTMLFormElement>) {
    event.preventDefault();
    const form = event.currentTarget;
    const label = formText(new FormData(form), "label").trim();
    setBusy(true);
    setStatus(null);
    const result = await callApi<{ id: string; token: string }>("POST", tokensPath, {
      role,
      ...(label === "" ? {} : { label }),
    });
    setBusy(false);
    if (!result.ok) {
      setStatus({ kind: "error", text: describeFailure(result) });
      return;
    }
    form.reset();
    setCreated({ id: result.data.id, token: result.data.token });
    refresh();
  }

  async function revoke(token: TokenRow) {
    setBusy(true);
    setStatus(null);
    const result = await callApi("DELETE", `${tokensPath}/${encodeURIComponent(token.id)}`);
    setBusy(false);
    setConfirming(null);
    if (!result.ok) {
      setStatus({ kind: "error", text: describeFailure(result) });
      return;
    }
    if (created?.id === token.id) setCreated(null);
    setStatus({ kind: "ok", text: `Token ${token.prefix}… is revoked. Nodes using it can no longer join.` });
    refresh();
  }

  const token = created?.token ?? "<TOKEN>";
  const command = runCommand(program, origin, token, link);
  const commands = (
    <>
      <CopyBox text={command} label="the command" />
      {link === undefined ? (
        <p className="muted">
          This platform serves no built {program} yet, so the command expects it installed from a clone (its
          operator builds it with <code>npm run build -w @barnraise/web</code>).
        </p>
      ) : (
        <>
          <p className="muted">
            It needs Node.js 22 or newer. On a machine without it, this installs what is missing first:
          </p>
          <CopyBox text={installCommand(program, origin, token, link)} label="the install command" />
          {role === "trainer" ? (
            <>
              <p className="muted">
                To check the machine first (backend speed, clock, network, disk, token):
              </p>
              <CopyBox text={runCommand(program, origin, token, link, "doctor")} label="the doctor command" />
            </>
          ) : null}
        </>
      )}
    </>
  );
  const disabled = busy || refreshing;

  return (
    <div className="stack">
      <form className="inline-form" onSubmit={(event) => void create(event)}>
        <div className="field">
          <label htmlFor={`token-label-${role}`}>Label (optional)</label>
          <input
            id={`token-label-${role}`}
            name="label"
            maxLength={64}
            placeholder={role === "aux" ? "e.g. cloud-cpu-1" : "e.g. my desktop GPU"}
          />
        </div>
        <button type="submit" className="button" disabled={disabled}>
          {busy && confirming === null ? "Creating…" : `Create ${noun}`}
        </button>
      </form>

      {created ? (
        <div className="secret-box" role="region" aria-label={`New ${noun}`}>
          <p>
            <strong>Copy this {noun} now.</strong> It is shown only once: the platform keeps only a hash of
            it. Anyone who has it can join this experiment as you.
          </p>
          <CopyBox text={created.token} label={`the new ${noun}`} />
          <p>Then run this on the machine that should join:</p>
          {commands}
        </div>
      ) : (
        <div className="stack">
          <p className="muted">Create {aNoun}, then run this on the machine that should join:</p>
          {commands}
        </div>
      )}

      <p role="status" className={status ? `notice notice-${status.kind}` : "visually-hidden"}>
        {status?.text ?? ""}
      </p>

      <h3 className="card-title">Your {noun}s</h3>
      {tokens.length === 0 ? (
        <p className="muted">No {noun}s yet.</p>
      ) : (
        <ul className="plain-list" aria-label={`Your ${noun}s`}>
          {tokens.map((token) => (
            <li key={token.id} className="row-item">
              <div className="row-item-main">
                <strong>{token.label || "Unlabelled"}</strong> <code>{token.prefix}…</code>{" "}
                {token.revokedAt ? <span className="badge badge-danger">Revoked</span> : null}
                <p>
                  Created {formatTime(token.createdAt)}
                  {token.lastUsedAt ? ` · last used ${formatTime(token.lastUsedAt)}` : " · never used"}
                  {token.revokedAt ? ` · revoked ${formatTime(token.revokedAt)}` : ""}
                </p>
              </div>
              {token.revokedAt ? null : confirming === token.id ? (
                <div className="actions">
                  <button
                    type="button"
                    className="button button-danger button-small"
                    disabled={disabled}
                    onClick={() => void revoke(token)}
                  >
                    Yes, revoke {token.prefix}…
                  </button>
                  <button
                    type="button"
                    className="button button-quiet button-small"
                    disabled={disabled}
                    onClick={() => {
                      setConfirming(null);
                    }}
                  >
                    Cancel
                  </button>
                </div>
              ) : (
                <button
                  type="button"
                  className="button button-quiet button-small"
                  disabled={disabled}
                  onClick={() => {
                    setConfirming(token.id);
                  }}
                >
                  Revoke<span className="visually-hidden"> {token.prefix}…</span>
                </button>
              )}
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}
