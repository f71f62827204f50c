import type { AppContext } from "../context.ts";

/**
 * The newest aggregated metric point of an experiment (the last step of its newest timeline), for the
 * progress summary on its public page (the dashboard's curves read the downsampled series from the
 * metrics API instead). Points the organizer discarded are left out.
 */

export interface LatestMetric {
  readonly step: number;
  readonly loss: number;
  readonly samplesPerSecond: number;
  readonly alivePeers: number;
  readonly recordedAt: string;
}

export async function readLatestMetric(ctx: AppContext, experimentId: string): Promise<LatestMetric | null> {
  const latest = await ctx.db.metric.findFirst({
    where: { experimentId, discardedAt: null },
    orderBy: [{ timeline: "desc" }, { step: "desc" }],
  });
  if (latest === null) return null;
  return {
    step: latest.step,
    loss: latest.loss,
    samplesPerSecond: latest.samplesPerSecond,
    alivePeers: latest.alivePeers,
    recordedAt: latest.recordedAt.toISOString(),
  };
}
