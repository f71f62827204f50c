import { createLTTB } from "downsample";
import { DEFAULT_METRIC_POINTS, type MetricSeries } from "../../api/schemas/public.ts";
import type { AppContext } from "../context.ts";
import { findExperiment } from "./experiment-access.ts";

/**
 * The loss curve for the dashboard: every recorded step, or for a long run at most `maxPoints`
 * steps chosen by Largest-Triangle-Three-Buckets on loss against step, which keeps the first and
 * last steps and the curve's visible shape. Each kept step keeps all of its fields.
 */

interface StoredPoint {
  readonly step: number;
  readonly loss: number;
  readonly samplesPerSecond: number;
  readonly alivePeers: number;
  readonly recordedAt: Date;
}

const lossCurve = createLTTB<StoredPoint>({ x: "step", y: "loss" });

export async function readMetrics(
  ctx: AppContext,
  experimentId: string,
  maxPoints: number = DEFAULT_METRIC_POINTS,
): Promise<MetricSeries> {
  const experiment = await findExperiment(ctx, experimentId);
  const rows = await ctx.db.metric.findMany({
    where: { experimentId: experiment.id },
    orderBy: { step: "asc" },
    select: { step: true, loss: true, samplesPerSecond: true, alivePeers: true, recordedAt: true },
  });
  return {
    points: downsampleSteps(rows, maxPoints).map((point) => ({
      step: point.step,
      loss: point.loss,
      samplesPerSecond: point.samplesPerSecond,
      alivePeers: point.alivePeers,
      recordedAt: point.recordedAt.toISOString(),
    })),
    total: rows.length,
  };
}

/** At most `maxPoints` (≥ 2) of `points` (ascending by step), the first and last included. */
export function downsampleSteps<P extends StoredPoint>(points: readonly P[], maxPoints: number): P[] {
  if (points.length <= maxPoints) return [...points];
  const first = points[0];
  const last = points.at(-1);
  // LTTB needs a middle bucket (downsample 1.4 returns the first two points when asked for two).
  if (maxPoints < 3 && first !== undefined && last !== undefined) return [first, last];
  return Array.from(lossCurve(points as P[], maxPoints) as ArrayLike<P>);
}
