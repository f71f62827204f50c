import type { Leaderboard, LeaderboardEntry } from "../../api/schemas/public.ts";
import type { AppContext } from "../context.ts";
import { findExperiment } from "./experiment-access.ts";

/**
 * The experiment's leaderboard (DeDLOC I.2): one entry per user, summing what their nodes gave over
 * all of their sessions (a restarted node reports a new session, and each session keeps its credit)
 * — samples, compute time, bytes aggregated as a helper — with the longest session of any node and
 * the number of distinct nodes. Most samples first; ties by compute time, then by username.
 */
export async function readLeaderboard(ctx: AppContext, experimentId: string): Promise<Leaderboard> {
  const experiment = await findExperiment(ctx, experimentId);
  const groups = await ctx.db.contribution.groupBy({
    by: ["userId", "peerRowId"],
    where: { experimentId: experiment.id },
    _sum: { samples: true, computeSeconds: true, bytesAggregated: true },
    _max: { longestSessionSeconds: true },
  });
  const totals = new Map<string, Omit<LeaderboardEntry, "username">>();
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
  }
  const users = await ctx.db.user.findMany({
    where: { id: { in: [...totals.keys()] } },
    select: { id: true, username: true },
  });
  const usernames = new Map(users.map((user) => [user.id, user.username]));
  const entries = [...totals].flatMap(([userId, total]): LeaderboardEntry[] => {
    const username = usernames.get(userId);
    return username === undefined ? [] : [{ username, ...total }];
  });
  entries.sort(
    (a, b) =>
      b.samples - a.samples ||
      b.computeSeconds - a.computeSeconds ||
      (a.username < b.username ? -1 : a.username > b.username ? 1 : 0),
  );
  return { entries };
}
