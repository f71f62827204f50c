import { describe, expect, it } from "vitest";
import type { LeaderboardEntry } from "../src/api/schemas/public.ts";
import {
  DEFAULT_LEADERBOARD_SORT,
  nextSort,
  rankLeaderboard,
  sortLeaderboard,
  type LeaderboardKey,
} from "../app/_components/dashboard/leaderboard-sort.ts";

// The public leaderboard's ranks and column sorting.

function entry(username: string, values: Partial<LeaderboardEntry> = {}): LeaderboardEntry {
  return {
    username,
    samples: 0,
    computeSeconds: 0,
    bytesAggregated: 0,
    longestSessionSeconds: 0,
    peers: 1,
    nodeKinds: ["cli"],
    ...values,
  };
}

// Each numeric column orders the four users differently.
const entries: LeaderboardEntry[] = [
  entry("ada", {
    samples: 300,
    computeSeconds: 10,
    bytesAggregated: 4000,
    longestSessionSeconds: 50,
    peers: 2,
  }),
  entry("bo", {
    samples: 100,
    computeSeconds: 40,
    bytesAggregated: 1000,
    longestSessionSeconds: 70,
    peers: 4,
  }),
  entry("cy", { samples: 400, computeSeconds: 30, bytesAggregated: 0, longestSessionSeconds: 60, peers: 1 }),
  entry("dee", {
    samples: 200,
    computeSeconds: 20,
    bytesAggregated: 3000,
    longestSessionSeconds: 80,
    peers: 3,
  }),
];

const usernames = (list: readonly LeaderboardEntry[]) => list.map((item) => item.username);

describe("sortLeaderboard", () => {
  const ascending: Record<LeaderboardKey, string[]> = {
    username: ["ada", "bo", "cy", "dee"],
    samples: ["bo", "dee", "ada", "cy"],
    computeSeconds: ["ada", "dee", "cy", "bo"],
    bytesAggregated: ["cy", "bo", "dee", "ada"],
    longestSessionSeconds: ["ada", "cy", "bo", "dee"],
    peers: ["cy", "ada", "dee", "bo"],
  };

  for (const [key, order] of Object.entries(ascending) as [LeaderboardKey, string[]][]) {
    it(`sorts by ${key} in both directions`, () => {
      expect(usernames(sortLeaderboard(entries, { key, direction: "asc" }))).toEqual(order);
      expect(usernames(sortLeaderboard(entries, { key, direction: "desc" }))).toEqual([...order].reverse());
    });
  }

  it("keeps tied entries in their incoming order in both directions (stable)", () => {
    const tied = [
      entry("zed", { samples: 5 }),
      entry("amy", { samples: 9 }),
      entry("kim", { samples: 5 }),
      entry("bea", { samples: 5 }),
    ];
    expect(usernames(sortLeaderboard(tied, { key: "samples", direction: "asc" }))).toEqual([
      "zed",
      "kim",
      "bea",
      "amy",
    ]);
    expect(usernames(sortLeaderboard(tied, { key: "samples", direction: "desc" }))).toEqual([
      "amy",
      "zed",
      "kim",
      "bea",
    ]);
  });

  it("orders names as people read them: case-insensitive, numbers by value", () => {
    const names = ["user10", "Bob", "alice", "user2", "carol"].map((name) => entry(name));
    expect(usernames(sortLeaderboard(names, { key: "username", direction: "asc" }))).toEqual([
      "alice",
      "Bob",
      "carol",
      "user2",
      "user10",
    ]);
  });

  it("returns a copy and leaves its input alone", () => {
    const input = [...entries];
    sortLeaderboard(input, { key: "peers", direction: "asc" });
    expect(input).toEqual(entries);
  });
});

describe("rankLeaderboard", () => {
  it("ranks by samples, then compute time, then username, whatever the incoming order", () => {
    const ranked = rankLeaderboard([
      entry("eve", { samples: 10, computeSeconds: 5 }),
      entry("dan", { samples: 10, computeSeconds: 5 }),
      entry("fay", { samples: 50 }),
      entry("gus", { samples: 10, computeSeconds: 9 }),
    ]);
    expect(ranked.map((item) => [item.rank, item.username])).toEqual([
      [1, "fay"],
      [2, "gus"],
      [3, "dan"],
      [4, "eve"],
    ]);
  });

  it("keeps each user's rank when the table is sorted by another column", () => {
    const sorted = sortLeaderboard(rankLeaderboard(entries), { key: "username", direction: "asc" });
    expect(sorted.map((item) => [item.username, item.rank])).toEqual([
      ["ada", 2],
      ["bo", 4],
      ["cy", 1],
      ["dee", 3],
    ]);
  });
});

describe("nextSort", () => {
  it("starts with most samples first", () => {
    expect(DEFAULT_LEADERBOARD_SORT).toEqual({ key: "samples", direction: "desc" });
  });

  it("flips the direction of the active column", () => {
    expect(nextSort({ key: "samples", direction: "desc" }, "samples")).toEqual({
      key: "samples",
      direction: "asc",
    });
    expect(nextSort({ key: "samples", direction: "asc" }, "samples")).toEqual({
      key: "samples",
      direction: "desc",
    });
  });

  it("opens another column with numbers largest first and names A to Z", () => {
    expect(nextSort({ key: "samples", direction: "asc" }, "peers")).toEqual({
      key: "peers",
      direction: "desc",
    });
    expect(nextSort({ key: "samples", direction: "desc" }, "username")).toEqual({
      key: "username",
      direction: "asc",
    });
  });
});
