import { HELD_OUT_METRICS } from "@barnraise/protocol";
import type { CheckpointEvaluationView, CheckpointList, CheckpointView } from "../../api/schemas/public.ts";
import type { AppContext } from "../context.ts";
import { findExperiment } from "./experiment-access.ts";
import { hasTfjsExport } from "./read-checkpoint-tfjs.ts";
import type { ExperimentRecord } from "../records.ts";
import { storedConfigOf } from "../stored-config.ts";

/** The experiment's checkpoints for the public page and for peers, newest step first. */
export async function listCheckpoints(ctx: AppContext, experimentId: string): Promise<CheckpointList> {
  const experiment = await findExperiment(ctx, experimentId);
  const rows = await ctx.db.checkpoint.findMany({
    where: { experimentId: experiment.id },
    orderBy: [{ step: "desc" }, { createdAt: "desc" }],
  });
  const tfjs = tfjsExportOf(experiment);
  return { checkpoints: rows.map((row) => checkpointView(row, tfjs)) };
}

export interface CheckpointRow {
  readonly id: string;
  readonly experimentId: string;
  readonly step: number;
  readonly loss: number | null;
  readonly sizeBytes: bigint;
  readonly sha256: string;
  readonly generation: number;
  readonly timeline: number;
  readonly createdAt: Date;
  readonly evalMetric: string | null;
  readonly evalValue: number | null;
  readonly evalLoss: number | null;
  readonly evalSamples: number | null;
  readonly evaluatedAt: Date | null;
}

/** A checkpoint as the API shows it; `experiment` (its config) decides which exports it has. */
export function toCheckpointView(
  row: CheckpointRow,
  experiment: Pick<ExperimentRecord, "config">,
): CheckpointView {
  return checkpointView(row, tfjsExportOf(experiment));
}

/** Whether the experiment's checkpoints have a TF.js export (every model but ALBERT's). */
function tfjsExportOf(experiment: Pick<ExperimentRecord, "config">): boolean {
  return hasTfjsExport(storedConfigOf(experiment).model);
}

function checkpointView(row: CheckpointRow, tfjs: boolean): CheckpointView {
  const download = checkpointDownloadPath(row.experimentId, row.id);
  return {
    id: row.id,
    step: row.step,
    loss: row.loss,
    sizeBytes: Number(row.sizeBytes),
    sha256: row.sha256,
    generation: row.generation,
    timeline: row.timeline,
    createdAt: row.createdAt.toISOString(),
    downloadUrl: download,
    safetensorsUrl: `${download}/safetensors`,
    tfjsUrl: tfjs ? `${download}/tfjs/model.json` : null,
    evaluation: evaluationView(row),
  };
}

/** The aux's held-out evaluation of the checkpoint, or null before it recorded one. */
function evaluationView(row: CheckpointRow): CheckpointEvaluationView | null {
  const { evalMetric, evalValue, evalLoss, evalSamples, evaluatedAt } = row;
  const metric = HELD_OUT_METRICS.find((known) => known === evalMetric);
  if (metric === undefined || evalValue === null || evalLoss === null || evalSamples === null) return null;
  if (evaluatedAt === null) return null;
  return {
    metric,
    value: evalValue,
    loss: evalLoss,
    samples: evalSamples,
    evaluatedAt: evaluatedAt.toISOString(),
  };
}

export function checkpointDownloadPath(experimentId: string, checkpointId: string): string {
  return `/api/v1/experiments/${encodeURIComponent(experimentId)}/checkpoints/${encodeURIComponent(checkpointId)}`;
}
