import { useMemo, useState, type ReactNode } from "react";
import type { LeaderboardEntry, NodeKind } from "../../../src/api/schemas/public.ts";
import { formatBytes, formatCount } from "../format.ts";
import { formatCompactCount, formatDuration } from "./dashboard-format.ts";
import {
  DEFAULT_LEADERBOARD_SORT,
  nextSort,
  rankLeaderboard,
  sortLeaderboard,
  type LeaderboardKey,
  type LeaderboardSort,
  type RankedEntry,
} from "./leaderboard-sort.ts";

interface Column {
  readonly key: LeaderboardKey;
  readonly label: string;
  readonly numeric: boolean;
  readonly cell: (entry: RankedEntry) => ReactNode;
}

const columns: readonly Column[] = [
  { key: "username", label: "User", numeric: false, cell: (entry) => entry.username },
  {
    key: "samples",
    label: "Samples",
    numeric: true,
    cell: (entry) => <data value={entry.samples}>{formatCompactCount(entry.samples)}</data>,
  },
  {
    key: "computeSeconds",
    label: "Compute time",
    numeric: true,
    cell: (entry) => formatDuration(entry.computeSeconds),
  },
  {
    key: "bytesAggregated",
    label: "Bytes aggregated",
    numeric: true,
    cell: (entry) => <data value={entry.bytesAggregated}>{formatBytes(entry.bytesAggregated)}</data>,
  },
  {
    key: "longestSessionSeconds",
    label: "Longest session",
    numeric: true,
    cell: (entry) => formatDuration(entry.longestSessionSeconds),
  },
  { key: "peers", label: "Nodes", numeric: true, cell: (entry) => formatCount(entry.peers) },
];

const directionWords = { asc: "ascending", desc: "descending" } as const;

/** How each kind of node reads in its label, and what the label's tooltip says it is. */
const nodeKindLabels: Record<NodeKind, { readonly label: string; readonly title: string }> = {
  browser: { label: "Browser", title: "Trained in a signed-in volunteer's browser tab" },
  cli: { label: "CLI", title: "Ran as a peer on a machine, joined with a token" },
};

/**
 * Who contributed what, sortable by any column but the node kinds; the rank (by samples) stays with
 * each user. Each row labels the kinds of node the user's credit came from (browser tabs, machines).
 */
export function LeaderboardTable({ entries }: { readonly entries: readonly LeaderboardEntry[] }) {
  const [sort, setSort] = useState<LeaderboardSort>(DEFAULT_LEADERBOARD_SORT);
  const rows = useMemo(() => sortLeaderboard(rankLeaderboard(entries), sort), [entries, sort]);
  const sortedBy = columns.find((column) => column.key === sort.key)?.label ?? sort.key;

  return (
    <section aria-labelledby="leaderboard-heading" className="section">
      <h2 id="leaderboard-heading">Leaderboard</h2>
      {rows.length === 0 ? (
        <p className="muted">
          No contributions yet. Every volunteer who trains or helps average appears here.
        </p>
      ) : (
        <div className="table-wrap dashboard-table-wrap">
          <table data-testid="leaderboard" className="dashboard-table">
            <caption className="visually-hidden">
              Contributors, sorted by {sortedBy}, {directionWords[sort.direction]}
            </caption>
            <thead>
              <tr>
                <th scope="col" className="num">
                  Rank
                </th>
                {columns.map((column) => {
                  const active = column.key === sort.key;
                  return (
                    <th
                      key={column.key}
                      scope="col"
                      className={column.numeric ? "num" : undefined}
                      aria-sort={active ? directionWords[sort.direction] : undefined}
                    >
                      <button
                        type="button"
                        className="sort-button"
                        data-testid={`sort-${column.key}`}
                        onClick={() => {
                          setSort((current) => nextSort(current, column.key));
                        }}
                      >
                        {column.label}
                        <span className="sort-indicator" aria-hidden="true">
                          {active ? (sort.direction === "asc" ? "▲" : "▼") : "↕"}
                        </span>
                      </button>
                    </th>
                  );
                })}
                {/* Not sortable: a user's kinds are a set, with no order to rank by. */}
                <th scope="col">Node kind</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((entry) => (
                <tr key={entry.username} data-testid="leaderboard-row" data-username={entry.username}>
                  <td className="num">{entry.rank}</td>
                  {columns.map((column) =>
                    column.key === "username" ? (
                      <th key={column.key} scope="row" className="dashboard-user" title={entry.username}>
                        {column.cell(entry)}
                      </th>
                    ) : (
                      <td key={column.key} className={column.numeric ? "num" : undefined}>
                        {column.cell(entry)}
                      </td>
                    ),
                  )}
                  <td data-testid="leaderboard-node-kinds">
                    <span className="node-kinds">
                      {entry.nodeKinds.map((kind) => (
                        <span key={kind} className="badge" title={nodeKindLabels[kind].title}>
                          {nodeKindLabels[kind].label}
                        </span>
                      ))}
                    </span>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}
