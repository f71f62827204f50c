"use client";

import { DEFAULT_ROTATION_GRACE_MS } from "@barnraise/protocol";
import { useState } from "react";
import { StatusLine, useMutation } from "./mutation.tsx";

/** Pause or resume the run. */
export function PauseResume({
  experimentId,
  status,
}: {
  readonly experimentId: string;
  readonly status: "running" | "paused";
}) {
  const mutation = useMutation();
  const next = status === "running" ? "paused" : "running";
  return (
    <div className="stack">
      <p>
        {status === "running"
          ? "The run is open: peers may join and their work counts. Pausing refuses new joins and stops counting nodes until you resume."
          : "The run is paused: peers cannot join and no node is counted. Resume it to continue training."}
      </p>
      <div className="actions">
        <button
          type="button"
          className={status === "running" ? "button button-quiet" : "button"}
          disabled={mutation.busy}
          onClick={() =>
            void mutation.run(
              "POST",
              `/api/v1/experiments/${encodeURIComponent(experimentId)}/status`,
              { status: next },
              next === "paused" ? "The run is paused." : "The run is running again.",
            )
          }
        >
          {status === "running" ? "Pause the run" : "Resume the run"}
        </button>
      </div>
      <StatusLine status={mutation.status} />
    </div>
  );
}

/** How long passes of a replaced key keep working, in minutes. */
const GRACE_MINUTES = DEFAULT_ROTATION_GRACE_MS / 60_000;

/** Replace the experiment's authority key, after a confirmation step. */
export function RotateAuthorityKey({
  experimentId,
  publicKey,
  keyVersion,
}: {
  readonly experimentId: string;
  readonly publicKey: string;
  readonly keyVersion: number;
}) {
  const mutation = useMutation();
  const [confirming, setConfirming] = useState(false);
  return (
    <div className="stack">
      <p>
        The authority key signs every access pass and the config peers train on. Key version{" "}
        <strong>{keyVersion}</strong>, public key <code className="hash">{publicKey}</code>.
      </p>
      {confirming ? (
        <div className="notice notice-warn stack">
          <p>
            <strong>Rotate the key?</strong> The current key signs a certificate naming the new one, and
            running peers, aux peers included, follow the new key within seconds and fetch new passes on their
            own; peers that restart later follow it too. Passes of the current key stop working{" "}
            {GRACE_MINUTES} minutes after the rotation. Do this when you suspect the key leaked.
          </p>
          <div className="actions">
            <button
              type="button"
              className="button button-danger"
              disabled={mutation.busy}
              onClick={() =>
                void mutation
                  .run(
                    "POST",
                    `/api/v1/experiments/${encodeURIComponent(experimentId)}/authority-key`,
                    {},
                    `The authority key was replaced. Running peers follow the new key within seconds; passes of the old key stop working after ${GRACE_MINUTES} minutes.`,
                  )
                  .then(() => {
                    setConfirming(false);
                  })
              }
            >
              Yes, rotate the key
            </button>
            <button
              type="button"
              className="button button-quiet"
              disabled={mutation.busy}
              onClick={() => {
                setConfirming(false);
              }}
            >
              Cancel
            </button>
          </div>
        </div>
      ) : (
        <div className="actions">
          <button
            type="button"
            className="button button-quiet"
            onClick={() => {
              setConfirming(true);
            }}
          >
            Rotate the authority key…
          </button>
        </div>
      )}
      <StatusLine status={mutation.status} />
    </div>
  );
}
