import { createElement } from "react";
import { renderToStaticMarkup } from "react-dom/server";
import { describe, expect, it } from "vitest";
import { LeaderboardTable } from "../app/_components/dashboard/leaderboard-table.tsx";
import type { LeaderboardEntry } from "../src/api/schemas/public.ts";

/** The leaderboard table as the page renders it on the server: each row labels its node kinds. */

function entry(
  username: string,
  samples: number,
  nodeKinds: LeaderboardEntry["nodeKinds"],
): LeaderboardEntry {
  return {
    username,
    samples,
    computeSeconds: 1,
    bytesAggregated: 0,
    longestSessionSeconds: 1,
    peers: nodeKinds.length,
    nodeKinds,
  };
}

/** Each row's username and the labels in its node-kind cell, in the table's order. */
function kindsByRow(html: string): [string, string[]][] {
  return [
    ...html.matchAll(/data-username="([^"]+)".*?data-testid="leaderboard-node-kinds">(.*?)<\/td>/g),
  ].map(([, username, cell]) => [
    username ?? "",
    [...(cell ?? "").matchAll(/class="badge"[^>]*>([^<]*)</g)].map(([, label]) => label ?? ""),
  ]);
}

describe("leaderboard table", () => {
  it("labels each row with the kinds of node its credit came from", () => {
    const html = renderToStaticMarkup(
      createElement(LeaderboardTable, {
        entries: [
          entry("tab", 300, ["browser"]),
          entry("machine", 200, ["cli"]),
          entry("both", 100, ["browser", "cli"]),
        ],
      }),
    );
    expect(html).toContain('<th scope="col">Node kind</th>');
    expect(kindsByRow(html)).toEqual([
      ["tab", ["Browser"]],
      ["machine", ["CLI"]],
      ["both", ["Browser", "CLI"]],
    ]);
    expect(html).toContain('title="Trained in a signed-in volunteer&#x27;s browser tab"');
  });
});
