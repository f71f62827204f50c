import { signCheckpointAttestation } from "@barnraise/protocol";
import type { LatestCheckpoint } from "../../api/schemas/public.ts";
import { AppError, AppErrorCode } from "../app-error.ts";
import { openAuthorityKeyPair } from "../authority-keys.ts";
import type { AppContext } from "../context.ts";
import { findExperiment } from "./experiment-access.ts";
import { toCheckpointView } from "./list-checkpoints.ts";

/**
 * The checkpoint a run resumes from when no live peer can give its state: the newest checkpoint of
 * the run's current generation (highest step, then newest upload), or else the checkpoint the run
 * was last rolled back to. It comes with an attestation signed now by the experiment's current
 * authority key, so a node can check the file (from the platform or from any peer) before it trains
 * on it. NOT_FOUND when the run has no such checkpoint.
 */
export async function readLatestCheckpoint(ctx: AppContext, experimentId: string): Promise<LatestCheckpoint> {
  const experiment = await findExperiment(ctx, experimentId);
  const row =
    (await ctx.db.checkpoint.findFirst({
      where: { experimentId: experiment.id, generation: experiment.generation },
      orderBy: [{ step: "desc" }, { createdAt: "desc" }, { id: "desc" }],
    })) ??
    (experiment.rollbackCheckpointId === null
      ? null
      : await ctx.db.checkpoint.findFirst({
          where: { id: experiment.rollbackCheckpointId, experimentId: experiment.id },
        }));
  if (row === null) {
    throw new AppError(
      AppErrorCode.NOT_FOUND,
      `experiment ${experiment.id} has no checkpoint to resume from`,
    );
  }
  const attestation = signCheckpointAttestation(
    ctx.crypto,
    openAuthorityKeyPair(experiment, ctx.env.sealingSecrets),
    {
      experimentId: experiment.id,
      checkpointId: row.id,
      step: row.step,
      sha256: row.sha256,
      sizeBytes: Number(row.sizeBytes),
      generation: row.generation,
      timeline: row.timeline,
      configVersion: row.configVersion,
      createdAt: row.createdAt.getTime(),
    },
  );
  return { checkpoint: toCheckpointView(row, experiment), attestation };
}
