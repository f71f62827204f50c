import type { AppContext } from "../context.ts";
import { SWARM_FRESH_MS } from "../../api/schemas/public.ts";

/**
 * Sets the run gauges from the database just before a scrape: the experiments whose aux reported
 * alive trainers in its last heartbeat (fresh within SWARM_FRESH_MS, as the public page counts
 * them), and how many each has. An experiment without alive trainers has no series.
 */
export async function collectRunGauges(ctx: AppContext): Promise<void> {
  const since = new Date(ctx.now() - SWARM_FRESH_MS);
  const running = await ctx.db.experiment.findMany({
    where: { swarmSeenAt: { gte: since }, swarmAlivePeers: { gt: 0 } },
    select: { id: true, swarmAlivePeers: true },
  });
  ctx.metrics.alivePeers.reset();
  for (const experiment of running)
    ctx.metrics.alivePeers.set({ experiment: experiment.id }, experiment.swarmAlivePeers);
  ctx.metrics.activeRuns.set(running.length);
}
