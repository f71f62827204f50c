import { NODE_KINDS, NodeKind, type Leaderboard, type LeaderboardEntry } from "../../api/schemas/public.ts";
import type { AppContext } from "../context.ts";
import { findExperiment } from "./experiment-access.ts";

/**
 * The experiment's leaderboard (DeDLOC I.2): one entry per user, summing what their nodes gave over
 * all of their sessions (a restarted node reports a new session, and each session keeps its credit)
 * — samples, compute time, bytes aggregated as a helper — with the longest session of any node and
 * the number of distinct nodes, and which kinds those nodes are (browser tabs, token machines), read
 * from the tokens the credited nodes joined with. Most samples first; ties by compute time, then by
 * username.
 */
export async function readLeaderboard(ctx: AppContext, experimentId: string): Promise<Leaderboard> {
  const experiment = await findExperiment(ctx, experimentId);
  const groups = await ctx.db.contribution.groupBy({
    by: ["userId", "peerRowId"],
    where: { experimentId: experiment.id },
    _sum: { samples: true, computeSeconds: true, bytesAggregated: true },
    _max: { longestSessionSeconds: true },
  });
  const kindOfPeer = await nodeKindsOf(ctx, [...new Set(groups.map((group) => group.peerRowId))]);
  const totals = new Map<string, Omit<LeaderboardEntry, "username" | "nodeKinds">>();
  const kinds = new Map<string, Set<NodeKind>>();
  for (const group of groups) {
    const total = totals.get(group.userId);
    const samples = Number(group._sum.samples ?? 0n);
    const computeSeconds = group._sum.computeSeconds ?? 0;
    const bytesAggregated = Number(group._sum.bytesAggregated ?? 0n);
    const longestSessionSeconds = group._max.longestSessionSeconds ?? 0;
    totals.set(group.userId, {
      samples: (total?.samples ?? 0) + samples,
      computeSeconds: (total?.computeSeconds ?? 0) + computeSeconds,
      bytesAggregated: (total?.bytesAggregated ?? 0) + bytesAggregated,
      longestSessionSeconds: Math.max(total?.longestSessionSeconds ?? 0, longestSessionSeconds),
      peers: (total?.peers ?? 0) + 1,
    });
    const kind = kindOfPeer.get(group.peerRowId);
    if (kind !== undefined) kinds.set(group.userId, (kinds.get(group.userId) ?? new Set()).add(kind));
  }
  const users = await ctx.db.user.findMany({
    where: { id: { in: [...totals.keys()] } },
    select: { id: true, username: true },
  });
  const usernames = new Map(users.map((user) => [user.id, user.username]));
  const entries = [...totals].flatMap(([userId, total]): LeaderboardEntry[] => {
    const username = usernames.get(userId);
    const userKinds = kinds.get(userId);
    const nodeKinds = NODE_KINDS.filter((kind) => userKinds?.has(kind) === true);
    return username === undefined ? [] : [{ username, ...total, nodeKinds }];
  });
  entries.sort(
    (a, b) =>
      b.samples - a.samples ||
      b.computeSeconds - a.computeSeconds ||
      (a.username < b.username ? -1 : a.username > b.username ? 1 : 0),
  );
  return { entries };
}

/** Each peer's kind, as its token says: a browser token is a tab's, any other a machine's. */
async function nodeKindsOf(ctx: AppContext, peerRowIds: string[]): Promise<Map<string, NodeKind>> {
  const peers = await ctx.db.peer.findMany({
    where: { id: { in: peerRowIds } },
    select: { id: true, token: { select: { browser: true } } },
  });
  return new Map(peers.map((peer) => [peer.id, peer.token.browser ? NodeKind.browser : NodeKind.cli]));
}
