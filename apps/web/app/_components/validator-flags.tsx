"use client";

import { useState } from "react";
import type { CheckpointView } from "../../src/api/schemas/public.ts";
import type { ValidatorFlagView } from "../../src/api/schemas/validator-flags.ts";
import { RollbackButton, rollbackPath, rolledBackText } from "./checkpoint-rollback.tsx";
import { formatTime } from "./format.ts";
import { StatusLine, useMutation } from "./mutation.tsx";
import { flagEvidence, rollbackTarget, shortPeerId } from "./validator-flag-text.ts";

/**
 * The trainer nodes the aux's validator flagged, each with its evidence, a one-click ban of its
 * owner (the allowlist's ban: the swarm refuses their nodes within seconds, passes included) and a
 * rollback to the last checkpoint before the node's contributions started to hurt.
 */
export function ValidatorFlags({
  experimentId,
  flags,
  checkpoints,
  generation,
}: {
  readonly experimentId: string;
  readonly flags: readonly ValidatorFlagView[];
  readonly checkpoints: readonly CheckpointView[];
  /** The run's current rollback generation. */
  readonly generation: number;
}) {
  const mutation = useMutation();
  // The flag (by PeerId) whose rollback waits for confirmation.
  const [confirming, setConfirming] = useState<string | null>(null);

  async function ban(flag: ValidatorFlagView) {
    await mutation.run(
      "PUT",
      `/api/v1/experiments/${encodeURIComponent(experimentId)}/allowlist/${encodeURIComponent(flag.username)}`,
      { status: "banned" },
      `${flag.username} is banned; their nodes are no longer counted.`,
    );
  }

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
        The aux peer samples what each trainer sends to the rounds it helps average and measures the held-out
        loss after a step along it, next to the other trainers’ steps. A node whose steps raised the loss in
        most of its recent samples is listed here: it sends broken or hostile updates.
      </p>
      {flags.length === 0 ? (
        <p className="muted" data-testid="validator-flags-empty">
          No node is flagged.
        </p>
      ) : (
        <ul className="plain-list">
          {flags.map((flag) => {
            const before = rollbackTarget(flag, checkpoints, generation);
            return (
              <li
                key={flag.peerId}
                className="row-item"
                data-testid="validator-flag"
                data-peer-id={flag.peerId}
                data-username={flag.username}
              >
                <div className="row-item-main">
                  <strong>{flag.username}</strong> <code title={flag.peerId}>{shortPeerId(flag.peerId)}</code>{" "}
                  {flag.ownerStatus === "banned" ? (
                    <span className="badge badge-danger">banned</span>
                  ) : (
                    <span className="badge badge-warn">flagged</span>
                  )}
                  {flag.tokenRevoked ? (
                    <>
                      {" "}
                      <span className="badge">token revoked</span>
                    </>
                  ) : null}
                  <p data-testid="validator-flag-evidence">{flagEvidence(flag)}</p>
                  <p className="muted">
                    Hurt in {flag.hurtSamples} of its last {flag.recentSamples} samples · flagged{" "}
                    {formatTime(flag.firstFlaggedAt)},{" "}
                    {flag.reports === 1 ? "once" : `${flag.reports} reports`}, last{" "}
                    {formatTime(flag.reportedAt)}
                  </p>
                </div>
                <div className="actions">
                  {flag.ownerStatus === "banned" ? null : flag.ownerStatus === "organizer" ? (
                    <span className="muted">Your own node: stop it or revoke its token.</span>
                  ) : (
                    <button
                      type="button"
                      className="button button-small button-danger"
                      disabled={mutation.busy}
                      onClick={() => void ban(flag)}
                    >
                      {`Ban ${flag.username}`}
                    </button>
                  )}
                  {before === undefined ? null : (
                    <RollbackButton
                      step={before.step}
                      confirming={confirming === flag.peerId}
                      busy={mutation.busy}
                      title={`The last checkpoint before epoch ${flag.firstHurtEpoch}, when this node's contributions started to hurt`}
                      onAsk={() => {
                        setConfirming(flag.peerId);
                      }}
                      onCancel={() => {
                        setConfirming(null);
                      }}
                      onConfirm={() => void rollBack(before)}
                    />
                  )}
                </div>
              </li>
            );
          })}
        </ul>
      )}
      <StatusLine status={mutation.status} />
    </div>
  );
}
