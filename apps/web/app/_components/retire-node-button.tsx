"use client";

import { useRouter } from "next/navigation";
import { useState, useTransition } from "react";
import { callApi, describeFailure } from "./api-client.ts";

/**
 * Retires one of the user's machines, after a confirmation: its key may not join again, and it
 * gives up its place under the experiment's limits of machines at once.
 */
export function RetireNodeButton({ nodeId, name }: { readonly nodeId: string; readonly name: string }) {
  const router = useRouter();
  const [confirming, setConfirming] = useState(false);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const [refreshing, startRefresh] = useTransition();
  const disabled = busy || refreshing;

  async function retire() {
    setBusy(true);
    setError(null);
    const result = await callApi("POST", `/api/v1/me/nodes/${encodeURIComponent(nodeId)}/retire`);
    setBusy(false);
    setConfirming(false);
    if (!result.ok) {
      setError(describeFailure(result));
      return;
    }
    startRefresh(() => {
      router.refresh();
    });
  }

  if (!confirming) {
    return (
      <div className="actions">
        <button
          type="button"
          className="button button-quiet button-small"
          disabled={disabled}
          onClick={() => {
            setConfirming(true);
          }}
        >
          Retire {name}
        </button>
        {error === null ? null : (
          <p role="alert" className="notice notice-error">
            {error}
          </p>
        )}
      </div>
    );
  }
  return (
    <div className="actions">
      <button
        type="button"
        className="button button-danger button-small"
        disabled={disabled}
        onClick={() => void retire()}
      >
        Yes, retire {name}
      </button>
      <button
        type="button"
        className="button button-quiet button-small"
        disabled={disabled}
        onClick={() => {
          setConfirming(false);
        }}
      >
        Cancel
      </button>
    </div>
  );
}
