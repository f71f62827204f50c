"use client";

import { useRouter } from "next/navigation";
import { useState, useTransition, type SubmitEvent } from "react";
import { organizerEventLabels } from "../../src/server/alerts/alert-events.ts";
import type { AlertSettingsView } from "../../src/server/services/read-alert-settings.ts";
import { callApi, describeFailure, type ApiIssue } from "./api-client.ts";
import { CopyBox } from "./copy-box.tsx";
import { formatTime } from "./format.ts";
import { formText } from "./form-text.ts";
import { StatusLine, type MutationStatus } from "./mutation.tsx";
import { ORGANIZER_EVENTS, type OrganizerEvent } from "../../src/api/schemas/alerts.ts";

/**
 * The manage page's alerts: webhooks (add one, its secret shown once; send a test; remove), e-mail
 * recipients and their events, the stalled and aux-silent thresholds, and the recent delivery log.
 */
export function AlertSettings({
  experimentId,
  settings,
}: {
  readonly experimentId: string;
  readonly settings: AlertSettingsView;
}) {
  const router = useRouter();
  const [busy, setBusy] = useState(false);
  const [refreshing, startRefresh] = useTransition();
  const [status, setStatus] = useState<MutationStatus>(null);
  const [issues, setIssues] = useState<readonly ApiIssue[]>([]);
  const [created, setCreated] = useState<{ url: string; secret: string } | null>(null);
  const path = `/api/v1/experiments/${encodeURIComponent(experimentId)}/alerts`;
  const disabled = busy || refreshing;

  async function call<T>(
    method: "POST" | "PUT" | "DELETE",
    url: string,
    body: unknown,
    success: (data: T) => string,
  ): Promise<T | null> {
    setBusy(true);
    setStatus(null);
    setIssues([]);
    const result = await callApi<T>(method, url, body);
    setBusy(false);
    if (!result.ok) {
      setStatus({ kind: "error", text: describeFailure(result) });
      setIssues(result.issues);
      return null;
    }
    setStatus({ kind: "ok", text: success(result.data) });
    startRefresh(() => {
      router.refresh();
    });
    return result.data;
  }

  async function addWebhook(event: SubmitEvent<HTMLFormElement>) {
    event.preventDefault();
    const form = event.currentTarget;
    const data = new FormData(form);
    const url = formText(data, "url").trim();
    const events = data.getAll("events").filter((value) => typeof value === "string");
    const added = await call<{ secret: string }>(
      "POST",
      `${path}/webhooks`,
      { url, events },
      () => "Webhook added.",
    );
    if (added !== null) {
      form.reset();
      setCreated({ url, secret: added.secret });
    }
  }

  async function saveEmail(event: SubmitEvent<HTMLFormElement>) {
    event.preventDefault();
    const data = new FormData(event.currentTarget);
    const recipients = formText(data, "recipients")
      .split(/[\s,;]+/)
      .filter((address) => address !== "");
    await call(
      "PUT",
      path,
      {
        emailRecipients: recipients,
        emailEvents: data.getAll("emailEvents").filter((value) => typeof value === "string"),
        stalledAfterMinutes: Number(formText(data, "stalledAfterMinutes")),
        auxSilentAfterMinutes: Number(formText(data, "auxSilentAfterMinutes")),
      },
      () => "Alert settings saved.",
    );
  }

  const testOutcome = (data: {
    deliveries: { target: string; status: string; lastResult: string | null }[];
  }) =>
    data.deliveries
      .map((delivery) =>
        delivery.status === "delivered"
          ? `Test sent to ${delivery.target} (${delivery.lastResult ?? "ok"}).`
          : `Test to ${delivery.target} failed: ${delivery.lastResult ?? "no answer"}; it will be retried.`,
      )
      .join(" ");

  const issueOf = (field: string) =>
    issues.find((issue) => issue.path === field || issue.path.startsWith(`${field}.`))?.message;

  return (
    <div className="stack">
      <section aria-labelledby="webhooks-heading" className="card stack">
        <h3 id="webhooks-heading" className="card-title">
          Webhooks
        </h3>
        <p className="muted">
          The platform POSTs each alert as JSON, signed with the webhook’s secret (HMAC-SHA256 in the{" "}
          <code>Barnraise-Signature</code> header), and retries a failed delivery after 30 s, 2 min, 10 min
          and 1 h.
        </p>
        {settings.webhooks.length === 0 ? (
          <p>No webhooks yet.</p>
        ) : (
          <ul className="plain-list" aria-label="Webhooks">
            {settings.webhooks.map((webhook) => (
              <li key={webhook.id} className="row-item">
                <div className="row-item-main">
                  <code>{webhook.url}</code>
                  <p className="muted">
                    {webhook.events.map((name) => organizerEventLabels[name]).join(" · ")}
                  </p>
                </div>
                <div className="actions">
                  <button
                    type="button"
                    className="button button-quiet button-small"
                    disabled={disabled}
                    onClick={() => void call("POST", `${path}/test`, { webhookId: webhook.id }, testOutcome)}
                  >
                    Send test<span className="visually-hidden"> to {webhook.url}</span>
                  </button>
                  <button
                    type="button"
                    className="button button-danger button-small"
                    disabled={disabled}
                    onClick={() =>
                      void call(
                        "DELETE",
                        `${path}/webhooks/${encodeURIComponent(webhook.id)}`,
                        undefined,
                        () => `Webhook ${webhook.url} removed.`,
                      )
                    }
                  >
                    Remove<span className="visually-hidden"> {webhook.url}</span>
                  </button>
                </div>
              </li>
            ))}
          </ul>
        )}
        {created ? (
          <div className="secret-box" role="region" aria-label="New webhook secret">
            <p>
              <strong>Copy the secret of {created.url} now.</strong> It is shown only once; the receiver needs
              it to check each alert’s signature (docs/alerts.md shows how).
            </p>
            <CopyBox text={created.secret} label="the webhook secret" />
          </div>
        ) : null}
        <form className="stack" onSubmit={(event) => void addWebhook(event)} aria-label="Add a webhook">
          <div className="field">
            <label htmlFor="webhook-url">Webhook URL</label>
            <input
              id="webhook-url"
              name="url"
              type="url"
              required
              maxLength={2000}
              placeholder="https://example.org/hooks/barnraise"
            />
            {issueOf("url") ? <p className="field-error">{issueOf("url")}</p> : null}
          </div>
          <EventChoices name="events" legend="Send these events" checked={ORGANIZER_EVENTS} />
          <div className="actions">
            <button type="submit" className="button" disabled={disabled}>
              Add webhook
            </button>
          </div>
        </form>
      </section>

      <section aria-labelledby="email-heading" className="card stack">
        <h3 id="email-heading" className="card-title">
          E-mail and thresholds
        </h3>
        {settings.email.available ? null : (
          <p className="notice notice-warn">
            This platform sends no e-mail: its operator has not set <code>BARNRAISE_SMTP_URL</code> and{" "}
            <code>BARNRAISE_MAIL_FROM</code>. Recipients are kept, but nothing is sent until they do.
          </p>
        )}
        <form className="stack" onSubmit={(event) => void saveEmail(event)} aria-label="E-mail alerts">
          <div className="field">
            <label htmlFor="alert-recipients">E-mail recipients (one per line)</label>
            <textarea
              id="alert-recipients"
              name="recipients"
              rows={3}
              defaultValue={settings.email.recipients.join("\n")}
            />
            {issueOf("emailRecipients") ? <p className="field-error">{issueOf("emailRecipients")}</p> : null}
          </div>
          <EventChoices name="emailEvents" legend="E-mail these events" checked={settings.email.events} />
          <div className="field-row">
            <div className="field">
              <label htmlFor="stalled-after">Run stalled after (minutes without a new step)</label>
              <input
                id="stalled-after"
                name="stalledAfterMinutes"
                type="number"
                min={1}
                max={1440}
                required
                defaultValue={settings.stalledAfterMinutes}
              />
            </div>
            <div className="field">
              <label htmlFor="aux-silent-after">Aux silent after (minutes without a report)</label>
              <input
                id="aux-silent-after"
                name="auxSilentAfterMinutes"
                type="number"
                min={1}
                max={1440}
                required
                defaultValue={settings.auxSilentAfterMinutes}
              />
            </div>
          </div>
          <div className="actions">
            <button type="submit" className="button" disabled={disabled}>
              Save alert settings
            </button>
            <button
              type="button"
              className="button button-quiet"
              disabled={disabled || !settings.email.available || settings.email.recipients.length === 0}
              onClick={() => void call("POST", `${path}/test`, { email: true }, testOutcome)}
            >
              Send test e-mail
            </button>
          </div>
        </form>
      </section>

      <StatusLine status={status} />

      <section aria-labelledby="deliveries-heading" className="card stack">
        <h3 id="deliveries-heading" className="card-title">
          Recent deliveries
        </h3>
        {settings.deliveries.length === 0 ? (
          <p className="muted">No alert has been sent yet.</p>
        ) : (
          <div className="table-wrap">
            <table data-testid="alert-deliveries">
              <thead>
                <tr>
                  <th scope="col">Queued</th>
                  <th scope="col">Event</th>
                  <th scope="col">To</th>
                  <th scope="col">Status</th>
                  <th scope="col">Attempts</th>
                  <th scope="col">Last result</th>
                  <th scope="col">Next retry</th>
                </tr>
              </thead>
              <tbody>
                {settings.deliveries.map((delivery) => (
                  <tr key={delivery.id}>
                    <td>{formatTime(delivery.createdAt)}</td>
                    <td>
                      <code>{delivery.event}</code>
                    </td>
                    <td>
                      {delivery.channel === "email" ? "✉ " : ""}
                      <code>{delivery.target}</code>
                    </td>
                    <td>
                      <span
                        className={
                          delivery.status === "delivered"
                            ? "badge badge-ok"
                            : delivery.status === "failed"
                              ? "badge badge-danger"
                              : "badge badge-warn"
                        }
                      >
                        {delivery.status}
                      </span>
                    </td>
                    <td>{delivery.attempts}</td>
                    <td>{delivery.lastResult ?? "—"}</td>
                    <td>{delivery.nextAttemptAt === null ? "—" : formatTime(delivery.nextAttemptAt)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
      </section>
    </div>
  );
}

function EventChoices({
  name,
  legend,
  checked,
}: {
  readonly name: string;
  readonly legend: string;
  readonly checked: readonly OrganizerEvent[];
}) {
  return (
    <fieldset className="fieldset-plain field">
      <legend>{legend}</legend>
      {ORGANIZER_EVENTS.map((event) => (
        <label key={event} className="check">
          <input type="checkbox" name={name} value={event} defaultChecked={checked.includes(event)} />
          <span>{organizerEventLabels[event]}</span>
        </label>
      ))}
    </fieldset>
  );
}
