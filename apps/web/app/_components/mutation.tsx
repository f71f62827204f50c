"use client";

import { useRouter } from "next/navigation";
import { useState, useTransition } from "react";
import { callApi, describeFailure } from "./api-client.ts";

/** The organizer's one-click actions: a call to the API, its outcome in a status line, then a refresh. */

export type MutationStatus = { readonly kind: "error" | "ok"; readonly text: string } | null;

export interface Mutation {
  /** A call is in flight, or the page is refreshing after one. */
  readonly busy: boolean;
  readonly status: MutationStatus;
  /** Calls the API; on success shows `success` and refreshes the page's server data. */
  run(method: "POST" | "PUT", path: string, body: unknown, success: string): Promise<boolean>;
}

export function useMutation(): Mutation {
  const router = useRouter();
  const [busy, setBusy] = useState(false);
  const [status, setStatus] = useState<MutationStatus>(null);
  const [refreshing, startRefresh] = useTransition();
  async function run(method: "POST" | "PUT", path: string, body: unknown, success: string): Promise<boolean> {
    setBusy(true);
    setStatus(null);
    const result = await callApi(method, path, body);
    setBusy(false);
    if (!result.ok) {
      setStatus({ kind: "error", text: describeFailure(result) });
      return false;
    }
    setStatus({ kind: "ok", text: success });
    startRefresh(() => {
      router.refresh();
    });
    return true;
  }
  return { busy: busy || refreshing, status, run };
}

/** The outcome of the last call, announced to screen readers; empty (and hidden) before the first. */
export function StatusLine({ status }: { readonly status: MutationStatus }) {
  return (
    <p role="status" className={status ? `notice notice-${status.kind}` : "visually-hidden"}>
      {status?.text ?? ""}
    </p>
  );
}
