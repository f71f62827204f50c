import { HeldOutMetric } from "@barnraise/protocol";
import type { CheckpointEvaluationView, CheckpointView } from "../../../src/api/schemas/public.ts";
import { formatDecimal, formatPercent } from "../format.ts";

/**
 * The held-out evaluations of a run's checkpoints as the dashboard shows them: one point per
 * evaluated checkpoint, by step, with the metric its model is judged by and the held-out loss.
 */

export interface EvaluationPoint {
  readonly step: number;
  /** The metric's value (accuracy, perplexity or mean absolute error). */
  readonly value: number;
  readonly loss: number;
  readonly samples: number;
  readonly timeline: number;
}

export interface EvaluationSeries {
  /** The metric of the points; null when no checkpoint was evaluated. */
  readonly metric: HeldOutMetric | null;
  /** Ascending by step (the older timeline first on a tie). */
  readonly points: readonly EvaluationPoint[];
}

/**
 * The points of the evaluated checkpoints among `checkpoints` (in any order). Should checkpoints
 * carry different metrics (the organizer changed the model), only those of the newest evaluated
 * checkpoint's metric are kept: two metrics cannot share one axis. A point that a later timeline
 * went back over (a rollback or resume restarted at or before its step, and a checkpoint of the
 * later timeline is at or before it) is left out, so the line follows the model the run builds on
 * instead of zig-zagging between two models' scores at the same steps.
 */
export function evaluationSeries(checkpoints: readonly CheckpointView[]): EvaluationSeries {
  const evaluated = checkpoints.flatMap((checkpoint) =>
    checkpoint.evaluation === null ? [] : [{ checkpoint, evaluation: checkpoint.evaluation }],
  );
  const newest = evaluated.reduce<(typeof evaluated)[number] | undefined>(
    (latest, entry) =>
      latest === undefined || entry.checkpoint.createdAt > latest.checkpoint.createdAt ? entry : latest,
    undefined,
  );
  if (newest === undefined) return { metric: null, points: [] };
  const metric = newest.evaluation.metric;
  /** The earliest checkpoint step of each timeline: where, at the latest, it went back to. */
  const firstStep = new Map<number, number>();
  for (const { checkpoint } of evaluated) {
    firstStep.set(
      checkpoint.timeline,
      Math.min(firstStep.get(checkpoint.timeline) ?? Infinity, checkpoint.step),
    );
  }
  const overtaken = (timeline: number, step: number) =>
    [...firstStep].some(([later, first]) => later > timeline && first <= step);
  const points = evaluated
    .filter(({ evaluation }) => evaluation.metric === metric && Number.isFinite(evaluation.value))
    .filter(({ checkpoint }) => !overtaken(checkpoint.timeline, checkpoint.step))
    .map(({ checkpoint, evaluation }) => ({
      step: checkpoint.step,
      value: evaluation.value,
      loss: evaluation.loss,
      samples: evaluation.samples,
      timeline: checkpoint.timeline,
    }))
    .sort((a, b) => a.step - b.step || a.timeline - b.timeline);
  return { metric, points };
}

/** The metric's name in a sentence or a legend: "accuracy", "perplexity", "mean absolute error". */
export function metricName(metric: HeldOutMetric): string {
  switch (metric) {
    case HeldOutMetric.accuracy:
      return "accuracy";
    case HeldOutMetric.perplexity:
      return "perplexity";
    case HeldOutMetric.mae:
      return "mean absolute error";
  }
}

/** A value of `metric` for reading: an accuracy as a percentage, the others as decimals. */
export function formatMetricValue(metric: HeldOutMetric, value: number): string {
  return metric === HeldOutMetric.accuracy ? formatPercent(value) : formatDecimal(value);
}

/** One evaluation in a table cell: "accuracy 91.2 %", "perplexity 48.31", "MAE 0.1234". */
export function formatEvaluation(evaluation: Pick<CheckpointEvaluationView, "metric" | "value">): string {
  const label = evaluation.metric === HeldOutMetric.mae ? "MAE" : metricName(evaluation.metric);
  return `${label} ${formatMetricValue(evaluation.metric, evaluation.value)}`;
}
