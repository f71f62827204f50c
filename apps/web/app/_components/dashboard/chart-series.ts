import type { MetricPoint } from "../../../src/api/schemas/public.ts";
import { formatClock, formatClockSeconds, formatDayClock } from "./dashboard-format.ts";

/**
 * The metric series as the charts plot it: one row per recorded step with the time as Unix
 * milliseconds, so a time axis can be numeric and scale with the gaps between steps.
 */

export interface ChartPoint {
  readonly step: number;
  /** Unix time in milliseconds when the step was recorded. */
  readonly time: number;
  readonly loss: number;
  readonly samplesPerSecond: number;
  readonly alivePeers: number;
}

/**
 * Chart rows for `points` (ascending by step). A point whose time cannot be read or whose loss is not
 * a finite number is left out rather than drawn at a wrong place; the order is kept.
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
      },
    ];
  });
}

const DAY_MS = 86_400_000;
/** Runs shorter than this get seconds on their ticks, which would otherwise repeat the same minute. */
const SECONDS_SPAN_MS = 10 * 60_000;

/**
 * A tick formatter for a time axis over `points`: the clock with seconds for a run of a few minutes,
 * the clock alone within a day, else day and clock.
 */
export function timeTickFormatter(points: readonly ChartPoint[]): (ms: number) => string {
  const first = points[0]?.time ?? 0;
  const last = points.at(-1)?.time ?? first;
  const span = last - first;
  if (points.length >= 2 && span < SECONDS_SPAN_MS) return formatClockSeconds;
  return span < DAY_MS ? formatClock : formatDayClock;
}
