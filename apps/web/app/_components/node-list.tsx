import Link from "next/link";
import { peerStatusMessage } from "../../src/server/services/peer-status.ts";
import type { NodeView } from "../../src/server/services/list-my-nodes.ts";
import { formatTime } from "./format.ts";
import { RetireNodeButton } from "./retire-node-button.tsx";

/** A user's nodes: whether each counts toward its experiment and, if not, why, in a sentence. */
export function NodeList({
  nodes,
  showExperiment,
}: {
  readonly nodes: readonly NodeView[];
  readonly showExperiment: boolean;
}) {
  return (
    <ul className="plain-list" aria-label="Nodes">
      {nodes.map((node) => (
        <li key={node.id} className="row-item">
          <div className="row-item-main">
            <strong>{node.role === "aux" ? "Aux peer" : "Trainer"}</strong>{" "}
            <code title={node.peerId}>{shortPeerId(node.peerId)}</code>{" "}
            {node.counted ? (
              <span className="badge badge-ok">Counted</span>
            ) : node.reason === "paused" ? (
              <span className="badge">Paused</span>
            ) : (
              <span className="badge badge-warn">Not counted</span>
            )}
            {node.retiredAt === null ? null : <span className="badge badge-danger">Retired</span>}
            <p>
              {showExperiment ? (
                <>
                  <Link href={`/experiments/${encodeURIComponent(node.experimentId)}`}>
                    {node.experimentName}
                  </Link>
                  {" · "}
                </>
              ) : null}
              token {node.tokenLabel ? `“${node.tokenLabel}” ` : ""}
              <code>{node.tokenPrefix}…</code> · last seen {formatTime(node.lastSeenAt)} · pass valid until{" "}
              {formatTime(node.passExpiresAt)}
              {node.address ? (
                <>
                  {" "}
                  · <code>{node.address}</code>
                </>
              ) : null}
            </p>
            <p className={node.counted ? undefined : "node-reason"}>
              {node.counted || node.reason === null
                ? "This node is online and its work counts toward the run."
                : peerStatusMessage(
                    node.reason,
                    node.swarmRefusal === null
                      ? null
                      : { ...node.swarmRefusal, at: new Date(node.swarmRefusal.at) },
                    node.pauseReasons ?? [],
                  )}
            </p>
          </div>
          {node.role === "trainer" && node.retiredAt === null ? (
            <RetireNodeButton nodeId={node.id} name={shortPeerId(node.peerId)} />
          ) : null}
        </li>
      ))}
    </ul>
  );
}

function shortPeerId(peerId: string): string {
  return peerId.length <= 16 ? peerId : `${peerId.slice(0, 8)}…${peerId.slice(-6)}`;
}
