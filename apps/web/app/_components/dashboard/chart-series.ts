import type { MetricPoint, RunEventView } from "../../../src/api/schemas/public.ts";
import { formatClock, formatClockSeconds, formatDayClock } from "./dashboard-format.ts";
import { markerLabel } from "./run-events.ts";

/**
 * The metric series as the charts plot it: one row per recorded step with the time as Unix
 * milliseconds, so a time axis can be numeric and scale with the gaps between steps. A run that was
 * rolled back or resumed from an earlier step has several timelines; their points share the axes,
 * and the points no later timeline builds on (discarded) are drawn apart from the live curve.
 */

export interface ChartPoint {
  readonly step: number;
  /** Unix time in milliseconds when the step was recorded. */
  readonly time: number;
  readonly loss: number;
  readonly samplesPerSecond: number;
  readonly alivePeers: number;
  /** Mean bytes each trainer sent in the step's averaging round; null when the aux did not report it. */
  readonly bytesPerPeer: number | null;
  /** The share of the trainers' wall time spent computing (0 to 1); null when the aux did not report it. */
  readonly utilization: number | null;
  /** The samples the aux accepted into the step's averaging round; null when it reduced no part of it. */
  readonly samples: number | null;
  readonly timeline: number;
  /** A later timeline restarted from an earlier step: the run no longer builds on this point. */
  readonly discarded: boolean;
}

export type ChartAxis = "step" | "time";
/** The metrics an older aux program does not report: some steps have no value. */
export type ReportedMetric = "bytesPerPeer" | "utilization" | "samples";
export type ChartMetric = "loss" | "samplesPerSecond" | "alivePeers" | ReportedMetric;

/**
 * Chart rows for `points`. A point whose time cannot be read or whose loss is not a finite number is
 * left out rather than drawn at a wrong place; the order is kept.
 */
export function toChartPoints(points: readonly MetricPoint[]): ChartPoint[] {
  return points.flatMap((point): ChartPoint[] => {
    const time = Date.parse(point.recordedAt);
    if (!Number.isFinite(time) || !Number.isFinite(point.loss)) return [];
    return [
      {
        step: point.step,
        time,
        loss: point.loss,
        samplesPerSecond: point.samplesPerSecond,
        alivePeers: point.alivePeers,
        bytesPerPeer: point.bytesPerPeer,
        utilization: point.utilization,
        samples: point.samples,
        timeline: point.timeline,
        discarded: point.discarded,
      },
    ];
  });
}

/** The row key of one timeline's discarded points: each timeline's are drawn as their own line. */
export type DiscardedKey = `discarded-${number}`;

/**
 * One row of a chart's data: its place on both axes and its value under exactly one key, `live` or
 * the discarded key of its timeline. A line drawn with `connectNulls` over one key then joins only
 * that key's points.
 */
export interface ChartRow {
  readonly step: number;
  readonly time: number;
  readonly live?: number;
  readonly [discarded: DiscardedKey]: number | undefined;
}

export interface DiscardedSegment {
  readonly key: DiscardedKey;
  readonly timeline: number;
  readonly points: number;
}

export interface ChartSeries {
  /** Ascending by the chart's x axis (older timeline first on a tie). */
  readonly rows: readonly ChartRow[];
  readonly livePoints: number;
  /** One per timeline with discarded points, oldest timeline first; empty when nothing is split off. */
  readonly discarded: readonly DiscardedSegment[];
}

/**
 * The rows one chart draws: metric `y` over axis `x`, from the points that have a value of `y` (a
 * step an older aux reported without it is left out). With `splitDiscarded` the discarded points go
 * to their timeline's own series and `live` carries the rest; without it every point is live (the
 * swarm's throughput and peers were real whatever became of the steps).
 */
export function buildSeries(
  points: readonly ChartPoint[],
  x: ChartAxis,
  y: ChartMetric,
  { splitDiscarded }: { readonly splitDiscarded: boolean },
): ChartSeries {
  const sorted = [...points].sort((a, b) => a[x] - b[x] || a.timeline - b.timeline);
  const segments = new Map<number, number>();
  let livePoints = 0;
  const rows = sorted.flatMap((point): ChartRow[] => {
    const value = point[y];
    if (value === null) return [];
    const place = { step: point.step, time: point.time };
    if (!splitDiscarded || !point.discarded) {
      livePoints++;
      return [{ ...place, live: value }];
    }
    segments.set(point.timeline, (segments.get(point.timeline) ?? 0) + 1);
    return [{ ...place, [discardedKey(point.timeline)]: value }];
  });
  const discarded = [...segments]
    .sort(([a], [b]) => a - b)
    .map(([timeline, count]) => ({ key: discardedKey(timeline), timeline, points: count }));
  return { rows, livePoints, discarded };
}

export function discardedKey(timeline: number): DiscardedKey {
  return `discarded-${timeline}`;
}

/**
 * The point the run stands at: the live point of the highest step (the newer timeline on a tie),
 * or undefined when there is none.
 */
export function latestLivePoint<P extends { step: number; timeline: number; discarded: boolean }>(
  points: readonly P[],
): P | undefined {
  let latest: P | undefined;
  for (const point of points) {
    if (point.discarded) continue;
    if (
      latest === undefined ||
      point.step > latest.step ||
      (point.step === latest.step && point.timeline > latest.timeline)
    ) {
      latest = point;
    }
  }
  return latest;
}

/**
 * The latest live point that has a value of `metric`, with that value; undefined when none has one
 * (no step yet, or only steps from an aux program that does not report it).
 */
export function latestReported(
  points: readonly ChartPoint[],
  metric: ReportedMetric,
): { readonly step: number; readonly value: number } | undefined {
  const latest = latestLivePoint(points.filter((point) => point[metric] !== null));
  const value = latest?.[metric];
  return latest === undefined || value === null || value === undefined
    ? undefined
    : { step: latest.step, value };
}

/**
 * The live points ascending by step (the newer timeline after the older on a tie): the run's one
 * lineage, which is what the next-step estimate reads.
 */
export function livePointsByStep<P extends { step: number; timeline: number; discarded: boolean }>(
  points: readonly P[],
): P[] {
  return points
    .filter((point) => !point.discarded)
    .sort((a, b) => a.step - b.step || a.timeline - b.timeline);
}

/** A vertical line on a step axis where the run restarted from an earlier step. */
export interface StepMarker {
  readonly step: number;
  readonly label: string;
}

/** The markers for `events` on a step axis, ascending by step (in event order on a tie). */
export function stepMarkers(events: readonly RunEventView[]): StepMarker[] {
  return events
    .map((event) => ({ step: event.step, label: markerLabel(event) }))
    .sort((a, b) => a.step - b.step);
}

const DAY_MS = 86_400_000;
/** Runs shorter than this get seconds on their ticks, which would otherwise repeat the same minute. */
const SECONDS_SPAN_MS = 10 * 60_000;

/**
 * A tick formatter for a time axis over `points` (in any order): the clock with seconds for a run of
 * a few minutes, the clock alone within a day, else day and clock.
 */
export function timeTickFormatter(points: readonly { readonly time: number }[]): (ms: number) => string {
  let first = Number.POSITIVE_INFINITY;
  let last = Number.NEGATIVE_INFINITY;
  for (const { time } of points) {
    first = Math.min(first, time);
    last = Math.max(last, time);
  }
  const span = points.length === 0 ? 0 : last - first;
  if (points.length >= 2 && span < SECONDS_SPAN_MS) return formatClockSeconds;
  return span < DAY_MS ? formatClock : formatDayClock;
}
