"use client";

import type { ImplausibleNodeView } from "../../src/server/services/list-implausible-nodes.ts";
import { formatTime } from "./format.ts";
import { StatusLine, useMutation } from "./mutation.tsx";
import { shortPeerId } from "./validator-flag-text.ts";

/**
 * The trainer nodes whose progress records the swarm refused as implausible, each with the aux's
 * reason, and a one-click ban of its owner (as for the validator's flags).
 */
export function ImplausibleNodes({
  experimentId,
  nodes,
  flagAfter,
}: {
  readonly experimentId: string;
  readonly nodes: readonly ImplausibleNodeView[];
  /** Refused claims that flag a node (`FLAG_AFTER_REFUSALS`). */
  readonly flagAfter: number;
}) {
  const mutation = useMutation();

  async function ban(node: ImplausibleNodeView) {
    await mutation.run(
      "PUT",
      `/api/v1/experiments/${encodeURIComponent(experimentId)}/allowlist/${encodeURIComponent(node.username)}`,
      { status: "banned" },
      `${node.username} is banned; their nodes are no longer counted.`,
    );
  }

  return (
    <div className="stack">
      <p>
        Every peer checks the progress records the others gossip against the swarm: a step far ahead of
        everyone’s, more samples than the node announced, a throughput no other trainer comes near. Such a
        record is refused and never reaches the loss curve or the leaderboard. So is a share of the credit
        that the aux did not see go into a step. A node is listed here with what it claimed once {flagAfter}{" "}
        of its claims were refused: a few can come from an honest node&apos;s restarts mid-round.
      </p>
      {nodes.length === 0 ? (
        <p className="muted" data-testid="implausible-nodes-empty">
          No node was refused {flagAfter} claims.
        </p>
      ) : (
        <ul className="plain-list">
          {nodes.map((node) => (
            <li
              key={node.peerId}
              className="row-item"
              data-testid="implausible-node"
              data-peer-id={node.peerId}
              data-username={node.username}
            >
              <div className="row-item-main">
                <strong>{node.username}</strong> <code title={node.peerId}>{shortPeerId(node.peerId)}</code>{" "}
                {node.ownerStatus === "banned" ? (
                  <span className="badge badge-danger">banned</span>
                ) : (
                  <span className="badge badge-warn">implausible records</span>
                )}
                <p data-testid="implausible-node-evidence">{node.reason}</p>
                <p className="muted">
                  {node.count === 1 ? "One record" : `${node.count} records`} refused, the latest{" "}
                  {formatTime(node.at)}
                </p>
              </div>
              <div className="actions">
                {node.ownerStatus === "banned" ? null : node.ownerStatus === "organizer" ? (
                  <span className="muted">Your own node: stop it or revoke its token.</span>
                ) : (
                  <button
                    type="button"
                    className="button button-small button-danger"
                    disabled={mutation.busy}
                    onClick={() => void ban(node)}
                  >
                    {`Ban ${node.username}`}
                  </button>
                )}
              </div>
            </li>
          ))}
        </ul>
      )}
      <StatusLine status={mutation.status} />
    </div>
  );
}
