import type { LeaderboardEntry } from "../../../src/api/schemas/public.ts";

/**
 * The leaderboard's ranks and the visitor's choice of order. The rank is the standing by samples
 * contributed (ties by compute time, then username, as the API orders entries) and stays with its
 * user whichever column the table is sorted by.
 */

export type LeaderboardKey =
  "username" | "samples" | "computeSeconds" | "bytesAggregated" | "longestSessionSeconds" | "peers";

export type SortDirection = "asc" | "desc";

export interface LeaderboardSort {
  readonly key: LeaderboardKey;
  readonly direction: SortDirection;
}

export interface RankedEntry extends LeaderboardEntry {
  /** 1 for the most samples. */
  readonly rank: number;
}

export const DEFAULT_LEADERBOARD_SORT: LeaderboardSort = { key: "samples", direction: "desc" };

/** Entries with their rank, in rank order. */
export function rankLeaderboard(entries: readonly LeaderboardEntry[]): RankedEntry[] {
  return [...entries]
    .sort(
      (a, b) =>
        b.samples - a.samples || b.computeSeconds - a.computeSeconds || byCodeUnits(a.username, b.username),
    )
    .map((entry, index) => ({ ...entry, rank: index + 1 }));
}

const usernames = new Intl.Collator("en", { sensitivity: "base", numeric: true });

/**
 * A sorted copy of `entries`. Stable: entries that tie on the key keep their order in `entries`, in
 * both directions (descending reverses the comparison, not the list).
 */
export function sortLeaderboard<E extends LeaderboardEntry>(
  entries: readonly E[],
  sort: LeaderboardSort,
): E[] {
  const sign = sort.direction === "asc" ? 1 : -1;
  const { key } = sort;
  const compare =
    key === "username"
      ? (a: E, b: E) => usernames.compare(a.username, b.username)
      : (a: E, b: E) => a[key] - b[key];
  return [...entries].sort((a, b) => sign * compare(a, b));
}

/**
 * The order after a click on `key`'s header: the same column flips its direction; another column
 * starts with the direction most readers want first (names A→Z, numbers largest first).
 */
export function nextSort(current: LeaderboardSort, key: LeaderboardKey): LeaderboardSort {
  if (current.key === key) return { key, direction: current.direction === "asc" ? "desc" : "asc" };
  return { key, direction: key === "username" ? "asc" : "desc" };
}

function byCodeUnits(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
