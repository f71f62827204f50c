"use client";

import { useState } from "react";
import type { CheckpointView } from "../../src/api/schemas/public.ts";
import { formatBytes, formatCount, formatDecimal, formatTime } from "./format.ts";
import { StatusLine, useMutation } from "./mutation.tsx";

/** Where the organizer's rollback is posted. */
export function rollbackPath(experimentId: string): string {
  return `/api/v1/experiments/${encodeURIComponent(experimentId)}/rollback`;
}

/** What the page says once a rollback to the checkpoint of `step` is accepted. */
export function rolledBackText(step: number): string {
  return `Rolled the run back to the checkpoint of step ${step}. The swarm restarts from it within about 30 s.`;
}

/**
 * "Roll back to step N": a first click asks for confirmation in place (`onAsk`), then "Confirm"
 * calls `onConfirm` and "Cancel" `onCancel`.
 */
export function RollbackButton({
  step,
  confirming,
  busy,
  title,
  onAsk,
  onCancel,
  onConfirm,
}: {
  readonly step: number;
  readonly confirming: boolean;
  readonly busy: boolean;
  /** Why this checkpoint, shown on hover. */
  readonly title?: string;
  readonly onAsk: () => void;
  readonly onCancel: () => void;
  readonly onConfirm: () => void;
}) {
  if (!confirming) {
    return (
      <button
        type="button"
        className="button button-small button-quiet"
        disabled={busy}
        {...(title === undefined ? {} : { title })}
        onClick={onAsk}
      >
        {`Roll back to step ${step}`}
      </button>
    );
  }
  return (
    <>
      <button type="button" className="button button-small button-danger" disabled={busy} onClick={onConfirm}>
        {`Confirm roll back to step ${step}`}
      </button>
      <button type="button" className="button button-small button-quiet" disabled={busy} onClick={onCancel}>
        Cancel
      </button>
    </>
  );
}

/**
 * The organizer's list of checkpoints, newest step first, each with a "Roll back to step N" button.
 * A first click asks for confirmation in place; the second posts the rollback. The swarm then
 * restarts from that checkpoint within about 30 s, and the steps after it are kept on the dashboard
 * as discarded.
 */
export function CheckpointRollback({
  experimentId,
  checkpoints,
  generation,
  rollbackCheckpointId,
}: {
  readonly experimentId: string;
  readonly checkpoints: readonly CheckpointView[];
  /** How many times the run was rolled back. */
  readonly generation: number;
  /** The checkpoint of the latest rollback, if any. */
  readonly rollbackCheckpointId: string | null;
}) {
  const mutation = useMutation();
  // The checkpoint whose rollback waits for confirmation.
  const [confirming, setConfirming] = useState<string | null>(null);

  async function rollBack(checkpoint: CheckpointView) {
    const done = await mutation.run(
      "POST",
      rollbackPath(experimentId),
      { checkpointId: checkpoint.id },
      rolledBackText(checkpoint.step),
    );
    if (done) setConfirming(null);
  }

  return (
    <div className="stack">
      <p>
        Rolling back restarts the whole swarm from a checkpoint: every peer drops its current state, loads the
        checkpoint and trains on from its step. The steps recorded after it stay on the dashboard, marked as
        discarded. Use it when training went wrong, for example when the loss diverged.
      </p>
      <p data-testid="rollback-generation">
        {generation === 0
          ? "The run has never been rolled back."
          : `The run has been rolled back ${generation === 1 ? "once" : `${generation} times`}.`}
      </p>
      {checkpoints.length === 0 ? (
        <p className="muted">No checkpoints yet. The aux peer uploads them as the run trains.</p>
      ) : (
        <div className="table-wrap">
          <table data-testid="rollback-checkpoints">
            <thead>
              <tr>
                <th scope="col" className="num">
                  Step
                </th>
                <th scope="col" className="num">
                  Loss
                </th>
                <th scope="col" className="num">
                  Size
                </th>
                <th scope="col">Saved</th>
                <th scope="col">
                  <span className="visually-hidden">Roll back</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {checkpoints.map((checkpoint) => (
                <tr
                  key={checkpoint.id}
                  data-testid="rollback-checkpoint-row"
                  data-checkpoint-id={checkpoint.id}
                  data-step={checkpoint.step}
                >
                  <td className="num">{formatCount(checkpoint.step)}</td>
                  <td className="num">{checkpoint.loss === null ? "—" : formatDecimal(checkpoint.loss)}</td>
                  <td className="num">{formatBytes(checkpoint.sizeBytes)}</td>
                  <td>
                    <time dateTime={checkpoint.createdAt}>{formatTime(checkpoint.createdAt)}</time>
                    {checkpoint.id === rollbackCheckpointId ? (
                      <>
                        {" "}
                        <span className="badge badge-warn">latest rollback</span>
                      </>
                    ) : null}
                  </td>
                  <td>
                    <div className="actions">
                      <RollbackButton
                        step={checkpoint.step}
                        confirming={confirming === checkpoint.id}
                        busy={mutation.busy}
                        onAsk={() => {
                          setConfirming(checkpoint.id);
                        }}
                        onCancel={() => {
                          setConfirming(null);
                        }}
                        onConfirm={() => void rollBack(checkpoint)}
                      />
                    </div>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <StatusLine status={mutation.status} />
    </div>
  );
}
