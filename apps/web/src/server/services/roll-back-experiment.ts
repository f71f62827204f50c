import { RunEventKind } from "../../api/schemas/public.ts";
import { AppError, AppErrorCode } from "../app-error.ts";
import type { AppContext } from "../context.ts";
import { requireOrganizer } from "./experiment-access.ts";
import { experimentViewOf, type ExperimentView } from "./read-experiment.ts";
import { lastStepOf } from "./run-timelines.ts";
import type { SessionUser } from "../records.ts";
import type { RollBackExperimentInput } from "../../api/schemas/experiments.ts";

/**
 * The organizer rolls the run back to one of its checkpoints: the run's generation grows (reports and
 * checkpoints of older generations are refused from now on), the checkpoint becomes the one every
 * node restarts from, a new metric timeline starts at its step (a "rolled-back" RunEvent; the old
 * timeline's later steps are shown as discarded), and the run control's version grows, so the swarm
 * learns of it on its next poll.
 */

export async function rollBackExperiment(
  ctx: AppContext,
  user: SessionUser,
  id: string,
  input: RollBackExperimentInput,
): Promise<ExperimentView> {
  const experiment = await requireOrganizer(ctx, id, user);
  const checkpoint = await ctx.db.checkpoint.findFirst({
    where: { id: input.checkpointId, experimentId: experiment.id },
    select: { id: true, step: true },
  });
  if (checkpoint === null) {
    throw new AppError(AppErrorCode.NOT_FOUND, `experiment ${id} has no checkpoint ${input.checkpointId}`);
  }
  const lastStep = await lastStepOf(ctx, experiment.id, experiment.timeline);
  const timeline = experiment.timeline + 1;
  const generation = experiment.generation + 1;
  const updated = await ctx.db.$transaction(async (tx) => {
    const { count } = await tx.experiment.updateMany({
      where: { id, timeline: experiment.timeline, generation: experiment.generation },
      data: {
        generation,
        timeline,
        rollbackCheckpointId: checkpoint.id,
        controlVersion: { increment: 1 },
      },
    });
    if (count === 0) {
      throw new AppError(AppErrorCode.CONFLICT, "the run changed while rolling it back; try again");
    }
    await tx.runEvent.create({
      data: {
        experimentId: id,
        kind: RunEventKind.rolledBack,
        step: checkpoint.step,
        fromStep: lastStep,
        timeline,
        checkpointId: checkpoint.id,
        createdAt: new Date(ctx.now()),
      },
    });
    return tx.experiment.findUniqueOrThrow({ where: { id } });
  });
  ctx.logger.info(
    { experimentId: id, checkpointId: checkpoint.id, step: checkpoint.step, generation, timeline },
    "run rolled back",
  );
  return experimentViewOf(ctx, updated);
}
