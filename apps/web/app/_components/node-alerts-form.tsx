"use client";

import { useRouter } from "next/navigation";
import { useState, useTransition, type SubmitEvent } from "react";
import type { NodeAlertsView } from "../../src/server/services/node-alerts.ts";
import { callApi, describeFailure } from "./api-client.ts";
import { formText } from "./form-text.ts";
import { StatusLine, type MutationStatus } from "./mutation.tsx";

/** "E-mail me when one of my nodes stops counting": the volunteer's opt-in, with the address to use. */
export function NodeAlertsForm({
  settings,
  suggestedEmail,
}: {
  readonly settings: NodeAlertsView;
  /** The account's e-mail (from an OIDC sign-in), offered when no address is set yet. */
  readonly suggestedEmail: string | null;
}) {
  const router = useRouter();
  const [enabled, setEnabled] = useState(settings.email !== null);
  const [busy, setBusy] = useState(false);
  const [refreshing, startRefresh] = useTransition();
  const [status, setStatus] = useState<MutationStatus>(null);

  async function save(event: SubmitEvent<HTMLFormElement>) {
    event.preventDefault();
    const email = formText(new FormData(event.currentTarget), "email").trim();
    setBusy(true);
    setStatus(null);
    const result = await callApi<NodeAlertsView>("PUT", "/api/v1/me/alerts", {
      email: enabled ? email : null,
    });
    setBusy(false);
    if (!result.ok) {
      setStatus({ kind: "error", text: describeFailure(result) });
      return;
    }
    setStatus({
      kind: "ok",
      text:
        result.data.email === null
          ? "You will not be e-mailed about your nodes."
          : `You will be e-mailed at ${result.data.email} when one of your nodes stops counting.`,
    });
    startRefresh(() => {
      router.refresh();
    });
  }

  return (
    <form className="card stack" aria-label="Node e-mails" onSubmit={(event) => void save(event)}>
      {settings.available ? null : (
        <p className="notice notice-warn">
          This platform sends no e-mail (its operator has not configured an SMTP server), so none will come
          until it does.
        </p>
      )}
      <label className="check">
        <input
          type="checkbox"
          checked={enabled}
          onChange={(event) => {
            setEnabled(event.target.checked);
          }}
        />
        <span>E-mail me when one of my nodes stops counting</span>
      </label>
      <div className="inline-form">
        <div className="field">
          <label htmlFor="node-alerts-email">E-mail address</label>
          <input
            id="node-alerts-email"
            name="email"
            type="email"
            maxLength={254}
            required={enabled}
            disabled={!enabled}
            defaultValue={settings.email ?? suggestedEmail ?? ""}
          />
        </div>
        <button type="submit" className="button" disabled={busy || refreshing}>
          Save
        </button>
      </div>
      <p className="muted">The e-mail names the node, the experiment and why the node no longer counts.</p>
      <StatusLine status={status} />
    </form>
  );
}
