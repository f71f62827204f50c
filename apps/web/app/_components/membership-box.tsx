"use client";

import Link from "next/link";
import { useRouter } from "next/navigation";
import { useState, useTransition } from "react";
import { callApi, describeFailure } from "./api-client.ts";

export type MembershipStatus = "organizer" | "approved" | "pending" | "banned" | "none";

export interface MembershipBoxProps {
  readonly experimentId: string;
  /** null for a visitor who is not signed in. */
  readonly status: MembershipStatus | null;
  readonly paused: boolean;
}

/** The "join this run" box on an experiment's page: what the signed-in user can do next. */
export function MembershipBox({ experimentId, status, paused }: MembershipBoxProps) {
  const router = useRouter();
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const [refreshing, startRefresh] = useTransition();
  const base = `/experiments/${encodeURIComponent(experimentId)}`;

  async function requestToJoin() {
    setBusy(true);
    setError(null);
    const result = await callApi(
      "POST",
      `/api/v1/experiments/${encodeURIComponent(experimentId)}/join-requests`,
      {},
    );
    setBusy(false);
    if (!result.ok) {
      setError(
        result.code === "BANNED"
          ? "You are banned from this experiment."
          : result.code === "CONFLICT"
            ? "You are already on this experiment's list. Reload the page to see your status."
            : describeFailure(result),
      );
      return;
    }
    startRefresh(() => {
      router.refresh();
    });
  }

  let body;
  switch (status) {
    case null:
      body = (
        <p>
          <Link href={`/sign-in?callbackUrl=${encodeURIComponent(base)}`}>Sign in</Link> to ask to join and
          lend your computer to this run.
        </p>
      );
      break;
    case "none":
      body = (
        <>
          <p>Lend your GPU or CPU to this run. The organizer approves who may join.</p>
          <div className="actions">
            <button
              type="button"
              className="button"
              disabled={busy || refreshing}
              onClick={() => void requestToJoin()}
            >
              {busy || refreshing ? "Sending request…" : "Request to join"}
            </button>
          </div>
        </>
      );
      break;
    case "pending":
      body = <p>Your request to join is waiting for the organizer’s approval.</p>;
      break;
    case "banned":
      body = <p>You are banned from this experiment and cannot join it.</p>;
      break;
    case "approved":
      body = (
        <>
          <p>You are approved to join this run.</p>
          <div className="actions">
            <Link className="button" href={`${base}/volunteer`}>
              Set up your computer
            </Link>
          </div>
        </>
      );
      break;
    case "organizer":
      body = (
        <>
          <p>You organize this run.</p>
          <div className="actions">
            <Link className="button" href={`${base}/manage`}>
              Manage
            </Link>
            <Link className="button button-secondary" href={`${base}/volunteer`}>
              Run a peer yourself
            </Link>
          </div>
        </>
      );
      break;
  }

  return (
    <section aria-labelledby="membership-heading" className="card stack">
      <h2 id="membership-heading" className="card-title">
        Take part
      </h2>
      {paused && status !== "organizer" ? (
        <p className="notice notice-warn">The organizer has paused this run; nodes wait until it resumes.</p>
      ) : null}
      {body}
      <p role="status" className={error ? "notice notice-error" : "visually-hidden"}>
        {error ?? ""}
      </p>
    </section>
  );
}
