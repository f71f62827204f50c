"use client";

import { useRouter } from "next/navigation";
import { useState, useTransition, type SubmitEvent } from "react";
import { callApi, describeFailure } from "./api-client.ts";
import { formText } from "./form-text.ts";

/**
 * The organizer's limits of machines: how many node keys one trainer token, and one volunteer across
 * their tokens, may run at once. A bound on sybils: one token cannot bring fifty machines.
 */
export function NodeLimitsForm({
  experimentId,
  limits,
}: {
  readonly experimentId: string;
  readonly limits: { readonly maxNodesPerToken: number; readonly maxNodesPerUser: number };
}) {
  const router = useRouter();
  const [status, setStatus] = useState<{ kind: "error" | "ok"; text: string } | null>(null);
  const [busy, setBusy] = useState(false);
  const [refreshing, startRefresh] = useTransition();

  async function save(event: SubmitEvent<HTMLFormElement>) {
    event.preventDefault();
    const form = new FormData(event.currentTarget);
    const perToken = Number(formText(form, "maxNodesPerToken"));
    const perUser = Number(formText(form, "maxNodesPerUser"));
    setBusy(true);
    setStatus(null);
    const result = await callApi("PATCH", `/api/v1/experiments/${encodeURIComponent(experimentId)}`, {
      limits: { maxNodesPerToken: perToken, maxNodesPerUser: perUser },
    });
    setBusy(false);
    if (!result.ok) {
      setStatus({ kind: "error", text: describeFailure(result) });
      return;
    }
    setStatus({
      kind: "ok",
      text: `Saved: at most ${perToken} per token and ${perUser} per volunteer. Running machines keep their places.`,
    });
    startRefresh(() => {
      router.refresh();
    });
  }

  return (
    <form className="stack" aria-label="Machines per volunteer" onSubmit={(event) => void save(event)}>
      <div className="grid-2">
        <div className="field">
          <label htmlFor="max-nodes-per-token">Machines per token</label>
          <input
            id="max-nodes-per-token"
            name="maxNodesPerToken"
            type="number"
            min={1}
            max={1000}
            required
            defaultValue={limits.maxNodesPerToken}
          />
        </div>
        <div className="field">
          <label htmlFor="max-nodes-per-user">Machines per volunteer</label>
          <input
            id="max-nodes-per-user"
            name="maxNodesPerUser"
            type="number"
            min={1}
            max={10000}
            required
            defaultValue={limits.maxNodesPerUser}
          />
        </div>
      </div>
      <p className="hint">
        A machine holds its place while its pass is valid; volunteers retire the ones they no longer use on
        the volunteer page.
      </p>
      <div className="actions">
        <button type="submit" className="button button-small" disabled={busy || refreshing}>
          Save limits
        </button>
      </div>
      <p role="status" className={status ? `notice notice-${status.kind}` : "visually-hidden"}>
        {status?.text ?? ""}
      </p>
    </form>
  );
}
