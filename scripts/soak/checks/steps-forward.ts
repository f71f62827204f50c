import type { CheckpointView, MetricPoint, MetricSeries } from "../../../apps/web/src/api/schemas/public.ts";
import { latestCheckpointBefore, type RestartFigure } from "../restart-figures.ts";
import { incarnationId, type CheckResult, type PeerHistory } from "../types.ts";
import { iso } from "./format.ts";

/**
 * Steps only moved forward: the recorded steps of each timeline in recording order, the reads of
 * steps and checkpoints over time, the checkpoints' order, and where the swarm went on after each
 * restart and resume, against the checkpoints taken before.
 */

/** Within each timeline, in recording order (recordedAt, ties by step), steps strictly increase. */
export function timelineProblems(points: readonly MetricPoint[]): string[] {
  const problems: string[] = [];
  const byTimeline = new Map<number, MetricPoint[]>();
  for (const point of points)
    byTimeline.set(point.timeline, [...(byTimeline.get(point.timeline) ?? []), point]);
  for (const [timeline, list] of byTimeline) {
    const ordered = [...list].sort(
      (a, b) => Date.parse(a.recordedAt) - Date.parse(b.recordedAt) || a.step - b.step,
    );
    for (let i = 1; i < ordered.length; i++) {
      const previous = ordered[i - 1];
      const point = ordered[i];
      if (previous !== undefined && point !== undefined && point.step <= previous.step) {
        problems.push(
          `timeline ${timeline}: step ${point.step} recorded at ${point.recordedAt}, after step ${previous.step} at ${previous.recordedAt}`,
        );
      }
    }
  }
  return problems;
}

/** Checkpoints of one rollback generation, in the order they were taken, never go back in step. */
export function checkpointOrderProblems(checkpoints: readonly CheckpointView[]): string[] {
  const problems: string[] = [];
  const ordered = [...checkpoints].sort((a, b) => Date.parse(a.createdAt) - Date.parse(b.createdAt));
  const highest = new Map<number, CheckpointView>();
  for (const checkpoint of ordered) {
    const before = highest.get(checkpoint.generation);
    if (before !== undefined && checkpoint.step < before.step) {
      problems.push(
        `checkpoint of step ${checkpoint.step} taken at ${checkpoint.createdAt}, after one of step ${before.step} (generation ${checkpoint.generation})`,
      );
    }
    if (before === undefined || checkpoint.step >= before.step)
      highest.set(checkpoint.generation, checkpoint);
  }
  return problems;
}

const metricKey = (point: Pick<MetricPoint, "timeline" | "step">) => `${point.timeline}/${point.step}`;

export function indexMetrics(series: MetricSeries): Map<string, MetricPoint> {
  return new Map(series.points.map((point) => [metricKey(point), point]));
}

/**
 * Compares a new read of the metrics with the rows seen before: a recorded step is never rewritten
 * (its loss and recording time stay) and, unless the answer was downsampled, never disappears.
 */
export function metricSnapshotProblems(
  previous: ReadonlyMap<string, MetricPoint>,
  series: MetricSeries,
): string[] {
  const problems: string[] = [];
  const now = indexMetrics(series);
  const complete = series.total === series.points.length;
  for (const [key, before] of previous) {
    const after = now.get(key);
    if (after === undefined) {
      if (complete) problems.push(`step ${key} (timeline/step) was recorded, then disappeared`);
    } else if (after.loss !== before.loss || after.recordedAt !== before.recordedAt) {
      problems.push(
        `step ${key} (timeline/step) was rewritten: loss ${before.loss} → ${after.loss}, recorded ${before.recordedAt} → ${after.recordedAt}`,
      );
    }
  }
  return problems;
}

/** A checkpoint, once listed, stays listed with its step. */
export function checkpointSnapshotProblems(
  previous: ReadonlyMap<string, CheckpointView>,
  checkpoints: readonly CheckpointView[],
): string[] {
  const now = new Map(checkpoints.map((checkpoint) => [checkpoint.id, checkpoint]));
  return [...previous.values()].flatMap((before) => {
    const after = now.get(before.id);
    if (after === undefined) return [`checkpoint ${before.id} of step ${before.step} disappeared`];
    if (after.step !== before.step)
      return [`checkpoint ${before.id} changed its step ${before.step} → ${after.step}`];
    return [];
  });
}

export interface StepsForwardInput {
  readonly metrics: MetricSeries;
  readonly checkpoints: readonly CheckpointView[];
  /** Problems found comparing the reads made every few seconds (metricSnapshotProblems, …). */
  readonly snapshotProblems: readonly string[];
  readonly figures: readonly RestartFigure[];
  readonly peers: readonly PeerHistory[];
}

export function checkStepsForward(input: StepsForwardInput): CheckResult {
  const { metrics, checkpoints, figures } = input;
  const behind = figures.flatMap((figure) =>
    figure.resumedFrom !== null &&
    figure.checkpointBefore !== null &&
    figure.resumedFrom < figure.checkpointBefore
      ? [
          `after the ${figure.kind}${figure.target === null ? "" : ` of ${figure.target}`} at ${iso(figure.at)} the swarm went on from step ${figure.resumedFrom}, behind the checkpoint of step ${figure.checkpointBefore}`,
        ]
      : [],
  );
  const resumes = metrics.events.filter((event) => event.kind === "resumed");
  const resumedBehind = resumes.flatMap((event) => {
    const checkpoint = latestCheckpointBefore(checkpoints, Date.parse(event.at));
    return checkpoint !== null && event.step < checkpoint
      ? [
          `the run resumed from step ${event.step} at ${event.at} (timeline ${event.timeline}), behind the checkpoint of step ${checkpoint}`,
        ]
      : [];
  });
  const problems = [
    ...timelineProblems(metrics.points),
    ...input.snapshotProblems,
    ...checkpointOrderProblems(checkpoints),
    ...behind,
    ...resumedBehind,
  ];
  const timelines = new Set(metrics.points.map((point) => point.timeline)).size;
  const info = [
    ...resumes.map(
      (event) =>
        `note: the run resumed from step ${event.step} (last recorded ${event.fromStep ?? "none"}) at ${event.at}, timeline ${event.timeline}`,
    ),
    ...(metrics.total > metrics.points.length
      ? [`note: the metrics were downsampled (${metrics.points.length} of ${metrics.total} steps read)`]
      : []),
    ...peerStepBacks(input.peers).map((line) => `note: ${line}`),
  ];
  const judged = figures.filter((figure) => figure.resumedFrom !== null && figure.checkpointBefore !== null);
  return {
    name: "steps only moved forward",
    pass: problems.length === 0,
    summary:
      `${metrics.total} steps in ${timelines} timeline(s), ${resumes.length} resume(s); ` +
      `${checkpoints.length} checkpoints; ${judged.length} restarts after a checkpoint, ${behind.length} behind it; ` +
      `${problems.length} problem(s)`,
    details: [...problems, ...info],
  };
}

/** Where a peer's own steps went back within one run (it loaded older state): reported, not failed. */
export function peerStepBacks(peers: readonly PeerHistory[]): string[] {
  return peers.flatMap((peer) => {
    const backs: string[] = [];
    peer.steps.forEach((line, i) => {
      const previous = peer.steps[i - 1];
      if (previous !== undefined && line.step <= previous.step) {
        backs.push(
          `${incarnationId(peer.incarnation)} logged step ${line.step} after step ${previous.step} at ${iso(line.time)}`,
        );
      }
    });
    return backs;
  });
}
