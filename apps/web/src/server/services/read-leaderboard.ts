import type { Leaderboard, LeaderboardEntry } from "../../api/schemas/public.ts";
import type { AppContext } from "../context.ts";
import { findExperiment } from "./experiment-access.ts";

/**
 * The experiment's leaderboard (DeDLOC I.2): one entry per user, summing what their nodes gave —
 * samples, compute time, bytes aggregated as a helper — with the longest session of any node. Most
 * samples first; ties by compute time, then by username.
 */
export async function readLeaderboard(ctx: AppContext, experimentId: string): Promise<Leaderboard> {
  const experiment = await findExperiment(ctx, experimentId);
  const groups = await ctx.db.contribution.groupBy({
    by: ["userId"],
    where: { experimentId: experiment.id },
    _sum: { samples: true, computeSeconds: true, bytesAggregated: true },
    _max: { longestSessionSeconds: true },
    _count: { peerRowId: true },
  });
  const users = await ctx.db.user.findMany({
    where: { id: { in: groups.map((group) => group.userId) } },
    select: { id: true, username: true },
  });
  const usernames = new Map(users.map((user) => [user.id, user.username]));
  const entries = groups.flatMap((group): LeaderboardEntry[] => {
    const username = usernames.get(group.userId);
    if (username === undefined) return [];
    return [
      {
        username,
        samples: Number(group._sum.samples ?? 0n),
        computeSeconds: group._sum.computeSeconds ?? 0,
        bytesAggregated: Number(group._sum.bytesAggregated ?? 0n),
        longestSessionSeconds: group._max.longestSessionSeconds ?? 0,
        peers: group._count.peerRowId,
      },
    ];
  });
  entries.sort(
    (a, b) =>
      b.samples - a.samples ||
      b.computeSeconds - a.computeSeconds ||
      (a.username < b.username ? -1 : a.username > b.username ? 1 : 0),
  );
  return { entries };
}
