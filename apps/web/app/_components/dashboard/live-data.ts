import {
  checkpointListSchema,
  leaderboardSchema,
  metricSeriesSchema,
  type CheckpointList,
  type Leaderboard,
  type MetricSeries,
} from "../../../src/api/schemas/public.ts";

/**
 * The dashboard's data and how a poll refreshes it: the three public reads are fetched side by side,
 * each answer that arrives and validates replaces its part, and a part whose read failed keeps what
 * is shown. Nothing on screen is ever replaced by an error.
 */

export interface DashboardData {
  readonly metrics: MetricSeries;
  readonly leaderboard: Leaderboard;
  readonly checkpoints: CheckpointList;
}

/** The number of metric points the charts ask for, the same as the page's first render. */
export const CHART_POINTS = 500;

export type DashboardSources = {
  readonly [K in keyof DashboardData]: (signal: AbortSignal) => Promise<DashboardData[K]>;
};

export interface PollResult {
  /** The parts that were read successfully. */
  readonly update: Partial<DashboardData>;
  /** Whether any part could not be read. */
  readonly failed: boolean;
}

/** Reads every part once; never rejects. */
export async function pollDashboard(sources: DashboardSources, signal: AbortSignal): Promise<PollResult> {
  const [metrics, leaderboard, checkpoints] = await Promise.allSettled([
    sources.metrics(signal),
    sources.leaderboard(signal),
    sources.checkpoints(signal),
  ]);
  const update: { -readonly [K in keyof DashboardData]?: DashboardData[K] } = {};
  if (metrics.status === "fulfilled") update.metrics = metrics.value;
  if (leaderboard.status === "fulfilled") update.leaderboard = leaderboard.value;
  if (checkpoints.status === "fulfilled") update.checkpoints = checkpoints.value;
  return {
    update,
    failed: [metrics, leaderboard, checkpoints].some((result) => result.status === "rejected"),
  };
}

/** `previous` with the parts that `update` carries replaced; `previous` itself when it carries none. */
export function mergeDashboard(previous: DashboardData, update: Partial<DashboardData>): DashboardData {
  if (update.metrics === undefined && update.leaderboard === undefined && update.checkpoints === undefined) {
    return previous;
  }
  return {
    metrics: update.metrics ?? previous.metrics,
    leaderboard: update.leaderboard ?? previous.leaderboard,
    checkpoints: update.checkpoints ?? previous.checkpoints,
  };
}

/** The public API as sources, each answer checked against its schema. */
export function apiSources(experimentId: string, fetchImpl: typeof fetch = fetch): DashboardSources {
  const base = `/api/v1/experiments/${encodeURIComponent(experimentId)}`;
  async function read<T>(
    path: string,
    schema: { parse(value: unknown): T },
    signal: AbortSignal,
  ): Promise<T> {
    const response = await fetchImpl(`${base}${path}`, {
      signal,
      cache: "no-store",
      headers: { accept: "application/json" },
    });
    if (!response.ok) throw new Error(`GET ${path} answered ${response.status}`);
    return schema.parse(await response.json());
  }
  return {
    metrics: (signal) => read(`/metrics?maxPoints=${CHART_POINTS}`, metricSeriesSchema, signal),
    leaderboard: (signal) => read("/leaderboard", leaderboardSchema, signal),
    checkpoints: (signal) => read("/checkpoints", checkpointListSchema, signal),
  };
}
