import { createLTTB } from "downsample";
import {
  DEFAULT_METRIC_POINTS,
  RunEventKind,
  type MetricSeries,
  type RunEventView,
} from "../../api/schemas/public.ts";
import type { AppContext } from "../context.ts";
import { findExperiment } from "./experiment-access.ts";
import { discardedBy } from "./run-timelines.ts";

/**
 * The metric series for the dashboard (each step's loss, throughput, peers, bytes sent per peer and
 * utilization): every recorded step of every timeline, each marked discarded when a later timeline
 * restarted from an earlier step, with the restarts themselves (RunEvents). Points the organizer
 * discarded (a forged or broken report) are left out altogether, and out of `total`.
 * A long run is downsampled to at most `maxPoints`: each timeline gets a share proportional to its
 * length, chosen by Largest-Triangle-Three-Buckets on loss against step, which keeps its first and
 * last steps and the curve's visible shape. Each kept step keeps all of its fields.
 */

interface StoredPoint {
  readonly step: number;
  readonly loss: number;
  readonly samplesPerSecond: number;
  readonly alivePeers: number;
  readonly recordedAt: Date;
}

interface TimelinePoint extends StoredPoint {
  readonly timeline: number;
}

const lossCurve = createLTTB<StoredPoint>({ x: "step", y: "loss" });

export async function readMetrics(
  ctx: AppContext,
  experimentId: string,
  maxPoints: number = DEFAULT_METRIC_POINTS,
): Promise<MetricSeries> {
  const experiment = await findExperiment(ctx, experimentId);
  const [rows, events] = await Promise.all([
    ctx.db.metric.findMany({
      where: { experimentId: experiment.id, discardedAt: null },
      orderBy: [{ timeline: "asc" }, { step: "asc" }],
      select: {
        timeline: true,
        step: true,
        loss: true,
        samplesPerSecond: true,
        alivePeers: true,
        bytesPerPeer: true,
        utilization: true,
        samples: true,
        recordedAt: true,
      },
    }),
    ctx.db.runEvent.findMany({
      where: { experimentId: experiment.id },
      orderBy: [{ createdAt: "asc" }, { timeline: "asc" }],
    }),
  ]);
  const discarded = discardedBy(events);
  return {
    points: downsampleTimelines(rows, maxPoints).map((point) => ({
      step: point.step,
      loss: point.loss,
      samplesPerSecond: point.samplesPerSecond,
      alivePeers: point.alivePeers,
      bytesPerPeer: point.bytesPerPeer,
      utilization: point.utilization,
      samples: point.samples,
      recordedAt: point.recordedAt.toISOString(),
      timeline: point.timeline,
      discarded: discarded(point.timeline, point.step),
    })),
    total: rows.length,
    events: events.map((event): RunEventView => ({
      kind: event.kind === RunEventKind.rolledBack ? RunEventKind.rolledBack : RunEventKind.resumed,
      step: event.step,
      fromStep: event.fromStep,
      timeline: event.timeline,
      checkpointId: event.checkpointId,
      at: event.createdAt.toISOString(),
    })),
  };
}

/**
 * At most `maxPoints` of `points` (ascending by timeline, then step). Each timeline gets a share of
 * `maxPoints` proportional to its length (largest remainders first); a share of 1 keeps its last
 * step, and a very short timeline among very many may get none.
 */
export function downsampleTimelines<P extends TimelinePoint>(points: readonly P[], maxPoints: number): P[] {
  if (points.length <= maxPoints) return [...points];
  const timelines: P[][] = [];
  for (const point of points) {
    const current = timelines.at(-1);
    if (current?.[0]?.timeline === point.timeline) current.push(point);
    else timelines.push([point]);
  }
  const shares = timelines.map((part) => (maxPoints * part.length) / points.length);
  const budgets = shares.map(Math.floor);
  let left = maxPoints - budgets.reduce((sum, budget) => sum + budget, 0);
  const byRemainder = shares
    .map((share, index) => ({ index, remainder: share - Math.floor(share) }))
    .sort((a, b) => b.remainder - a.remainder);
  for (const { index } of byRemainder) {
    if (left === 0) break;
    budgets[index] = (budgets[index] ?? 0) + 1;
    left -= 1;
  }
  return timelines.flatMap((part, index) => {
    const budget = Math.min(budgets[index] ?? 0, part.length);
    if (budget === 0) return [];
    if (budget === 1) return part.slice(-1);
    return downsampleSteps(part, budget);
  });
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
