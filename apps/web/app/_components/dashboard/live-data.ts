import { z } from "zod";
import {
  checkpointListSchema,
  leaderboardSchema,
  metricSeriesSchema,
  swarmStatusSchema,
  type CheckpointList,
  type Leaderboard,
  type MetricSeries,
} from "../../../src/api/schemas/public.ts";

/**
 * The dashboard's data and how a poll refreshes it: the four public reads are fetched side by side,
 * each answer that arrives and validates replaces its part, and a part whose read failed keeps what
 * is shown. Nothing on screen is ever replaced by an error.
 */

/**
 * The parts of the experiment's public view the dashboard follows: whether the organizer paused the
 * run and the live swarm. The rest of the view (the config, the keys) is not checked here.
 */
export const runStateSchema = z.object({
  status: z.enum(["running", "paused"]),
  swarm: swarmStatusSchema,
});
export type RunState = z.infer<typeof runStateSchema>;

export interface DashboardData {
  readonly run: RunState;
  readonly metrics: MetricSeries;
  readonly leaderboard: Leaderboard;
  readonly checkpoints: CheckpointList;
}

const parts = [
  "run",
  "metrics",
  "leaderboard",
  "checkpoints",
] as const satisfies readonly (keyof DashboardData)[];

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
  const [run, metrics, leaderboard, checkpoints] = await Promise.allSettled([
    sources.run(signal),
    sources.metrics(signal),
    sources.leaderboard(signal),
    sources.checkpoints(signal),
  ]);
  const update: { -readonly [K in keyof DashboardData]?: DashboardData[K] } = {};
  if (run.status === "fulfilled") update.run = run.value;
  if (metrics.status === "fulfilled") update.metrics = metrics.value;
  if (leaderboard.status === "fulfilled") update.leaderboard = leaderboard.value;
  if (checkpoints.status === "fulfilled") update.checkpoints = checkpoints.value;
  return {
    update,
    failed: [run, metrics, leaderboard, checkpoints].some((result) => result.status === "rejected"),
  };
}

/** `previous` with the parts that `update` carries replaced; `previous` itself when it carries none. */
export function mergeDashboard(previous: DashboardData, update: Partial<DashboardData>): DashboardData {
  if (parts.every((part) => update[part] === undefined)) return previous;
  return {
    run: update.run ?? previous.run,
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
    if (!response.ok) throw new Error(`GET ${base}${path} answered ${response.status}`);
    return schema.parse(await response.json());
  }
  return {
    run: (signal) => read("", runStateSchema, signal),
    metrics: (signal) => read(`/metrics?maxPoints=${CHART_POINTS}`, metricSeriesSchema, signal),
    leaderboard: (signal) => read("/leaderboard", leaderboardSchema, signal),
    checkpoints: (signal) => read("/checkpoints", checkpointListSchema, signal),
  };
}
