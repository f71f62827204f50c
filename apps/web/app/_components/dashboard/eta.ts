import { formatTime } from "../format.ts";
import { formatDuration } from "./dashboard-format.ts";

/**
 * When the swarm's next collaborative step should land, from the recent step rate: the median time
 * per step over the last (at most) ten recorded intervals, minus the time since the last step. The
 * median keeps one slow round (a peer dropping out mid-averaging) from swinging the estimate.
 */

/** The fields of a metric point the estimate needs. */
export interface StepTime {
  readonly step: number;
  /** ISO 8601. */
  readonly recordedAt: string;
}

export type NextStepEstimate =
  /** Fewer than two usable points: no rate to go by. */
  | { readonly kind: "unknown" }
  /** The next step is expected in `seconds`. */
  | { readonly kind: "due"; readonly seconds: number; readonly secondsPerStep: number }
  /** The expected time has passed: the step can land at any moment. */
  | { readonly kind: "overdue"; readonly secondsPerStep: number };

/** What the "next step" fact says: a paused run or an empty swarm waits; else the estimate. */
export type NextStepState =
  /** The organizer paused the run. */
  | { readonly kind: "paused" }
  /** No trainer is alive: the run waits for volunteers, since `since` (ISO 8601) when known. */
  | { readonly kind: "waiting"; readonly since: string | null }
  | NextStepEstimate;

/** The run's state as the experiment's public view tells it. */
export interface RunStatus {
  readonly status: "running" | "paused";
  readonly swarm: { readonly alivePeers: number; readonly waitingSince: string | null };
}

/** How many of the latest intervals between recorded points the rate is taken from. */
export const RECENT_INTERVALS = 10;

/**
 * The estimate at `nowMs` (Unix milliseconds) from `points` ascending by step. Points may be
 * downsampled, so each interval is divided by the number of steps it spans.
 */
export function estimateNextStep(points: readonly StepTime[], nowMs: number): NextStepEstimate {
  const recent = points.slice(-(RECENT_INTERVALS + 1));
  const perStep: number[] = [];
  for (let i = 1; i < recent.length; i++) {
    const before = recent[i - 1];
    const after = recent[i];
    if (before === undefined || after === undefined) continue;
    const steps = after.step - before.step;
    const ms = Date.parse(after.recordedAt) - Date.parse(before.recordedAt);
    if (steps > 0 && Number.isFinite(ms) && ms >= 0) perStep.push(ms / steps);
  }
  const last = recent.at(-1);
  const lastMs = last === undefined ? Number.NaN : Date.parse(last.recordedAt);
  if (perStep.length === 0 || !Number.isFinite(lastMs)) return { kind: "unknown" };

  const msPerStep = median(perStep);
  const remainingMs = lastMs + msPerStep - nowMs;
  const secondsPerStep = msPerStep / 1000;
  return remainingMs > 0
    ? { kind: "due", seconds: remainingMs / 1000, secondsPerStep }
    : { kind: "overdue", secondsPerStep };
}

/**
 * The next step at `nowMs`: none while the run is paused or no trainer is alive, else the estimate
 * from `points` (the live points, ascending by step).
 */
export function nextStepState(run: RunStatus, points: readonly StepTime[], nowMs: number): NextStepState {
  if (run.status === "paused") return { kind: "paused" };
  if (run.swarm.alivePeers === 0) return { kind: "waiting", since: run.swarm.waitingSince };
  return estimateNextStep(points, nowMs);
}

/** The median of a non-empty list (the mean of the middle two for an even length). */
export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  const upper = sorted[middle] ?? Number.NaN;
  if (sorted.length % 2 === 1) return upper;
  return ((sorted[middle - 1] ?? Number.NaN) + upper) / 2;
}

/**
 * The next step in words: "in about 12 s", "any moment", "—" when there is no rate yet, "Paused by the
 * organizer", or "Waiting for volunteers since 2026-11-21 14:03 UTC".
 */
export function describeNextStep(estimate: NextStepState): string {
  switch (estimate.kind) {
    case "paused":
      return "Paused by the organizer";
    case "waiting":
      return estimate.since === null
        ? "Waiting for volunteers"
        : `Waiting for volunteers since ${formatTime(estimate.since)}`;
    case "unknown":
      return "—";
    case "overdue":
      return "any moment";
    case "due":
      return `in about ${formatDuration(Math.max(1, Math.ceil(estimate.seconds)))}`;
  }
}
