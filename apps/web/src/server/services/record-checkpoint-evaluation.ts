import { heldOutMetricOf } from "@barnraise/protocol";
import type { CheckpointEvaluationRequest } from "../../api/schemas/peer.ts";
import type { CheckpointView } from "../../api/schemas/public.ts";
import { AppError, AppErrorCode } from "../app-error.ts";
import type { AppContext } from "../context.ts";
import { toCheckpointView } from "./list-checkpoints.ts";
import type { AuxCaller } from "../records.ts";
import { storedConfigOf } from "../stored-config.ts";

/**
 * The organizer's aux peer records its held-out evaluation of a checkpoint (`POST
 * …/checkpoints/{checkpointId}/evaluation`, signed): the score on the dataset's test split that the
 * public page charts beside the training loss.
 *
 * Refused: a checkpoint of another experiment or none (NOT_FOUND), a metric other than the one the
 * experiment's model is judged by (INVALID_INPUT: an accuracy for a masked LM would be charted as a
 * perplexity), and a checkpoint already evaluated (CONFLICT): like the rest of a checkpoint's row,
 * its evaluation is written once and never changed, so the chart never moves under a reader.
 */
export async function recordCheckpointEvaluation(
  ctx: AppContext,
  caller: AuxCaller,
  checkpointId: string,
  evaluation: CheckpointEvaluationRequest,
): Promise<CheckpointView> {
  const experiment = caller.experiment;
  const expected = heldOutMetricOf(storedConfigOf(experiment).model);
  if (evaluation.metric !== expected) {
    throw new AppError(
      AppErrorCode.INVALID_INPUT,
      `this experiment's model is evaluated by ${expected}, not ${evaluation.metric}`,
      { issues: [{ path: "metric", message: `must be ${expected}` }] },
    );
  }
  const checkpoint = await ctx.db.checkpoint.findUnique({
    where: { id: checkpointId },
    select: { experimentId: true },
  });
  if (checkpoint?.experimentId !== experiment.id) {
    throw new AppError(
      AppErrorCode.NOT_FOUND,
      `experiment ${experiment.id} has no checkpoint ${checkpointId}`,
    );
  }
  // Only a row not evaluated yet is written: of two evaluations sent at once, one wins.
  const { count } = await ctx.db.checkpoint.updateMany({
    where: { id: checkpointId, experimentId: experiment.id, evaluatedAt: null },
    data: {
      evalMetric: evaluation.metric,
      evalValue: evaluation.value,
      evalLoss: evaluation.loss,
      evalSamples: evaluation.samples,
      evaluatedAt: new Date(ctx.now()),
    },
  });
  const row = await ctx.db.checkpoint.findUniqueOrThrow({ where: { id: checkpointId } });
  if (count === 0) {
    throw new AppError(
      AppErrorCode.CONFLICT,
      `the checkpoint of step ${row.step} was already evaluated (${row.evalMetric ?? "?"} ${row.evalValue ?? "?"})`,
    );
  }
  ctx.logger.info(
    {
      experimentId: experiment.id,
      checkpointId,
      step: row.step,
      metric: evaluation.metric,
      value: evaluation.value,
      samples: evaluation.samples,
    },
    "checkpoint evaluated",
  );
  return toCheckpointView(row, experiment);
}
