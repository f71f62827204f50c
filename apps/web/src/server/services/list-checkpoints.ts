import type { CheckpointList, CheckpointView } from "../../api/schemas/public.ts";
import type { AppContext } from "../context.ts";
import { findExperiment } from "./experiment-access.ts";

/** The experiment's checkpoints for the public page and for peers, newest step first. */
export async function listCheckpoints(ctx: AppContext, experimentId: string): Promise<CheckpointList> {
  const experiment = await findExperiment(ctx, experimentId);
  const rows = await ctx.db.checkpoint.findMany({
    where: { experimentId: experiment.id },
    orderBy: [{ step: "desc" }, { createdAt: "desc" }],
  });
  return { checkpoints: rows.map(toCheckpointView) };
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
}

export function toCheckpointView(row: CheckpointRow): CheckpointView {
  return {
    id: row.id,
    step: row.step,
    loss: row.loss,
    sizeBytes: Number(row.sizeBytes),
    sha256: row.sha256,
    generation: row.generation,
    timeline: row.timeline,
    createdAt: row.createdAt.toISOString(),
    downloadUrl: checkpointDownloadPath(row.experimentId, row.id),
    safetensorsUrl: `${checkpointDownloadPath(row.experimentId, row.id)}/safetensors`,
  };
}

export function checkpointDownloadPath(experimentId: string, checkpointId: string): string {
  return `/api/v1/experiments/${encodeURIComponent(experimentId)}/checkpoints/${encodeURIComponent(checkpointId)}`;
}
