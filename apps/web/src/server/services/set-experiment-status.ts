import type { AppContext } from "../context.ts";
import { requireOrganizer } from "./experiment-access.ts";
import { experimentViewOf, type ExperimentView } from "./read-experiment.ts";
import type { SessionUser } from "../records.ts";
import type { SetExperimentStatusInput } from "../../api/schemas/experiments.ts";

/**
 * The organizer pauses or resumes the run; while paused, joins are refused and no node is counted.
 * The run control's version grows, so the swarm stops (or starts) training on its next poll.
 */

export async function setExperimentStatus(
  ctx: AppContext,
  user: SessionUser,
  id: string,
  input: SetExperimentStatusInput,
): Promise<ExperimentView> {
  const experiment = await requireOrganizer(ctx, id, user);
  if (experiment.status === input.status) return experimentViewOf(ctx, experiment);
  const updated = await ctx.db.experiment.update({
    where: { id },
    data: { status: input.status, controlVersion: { increment: 1 } },
  });
  ctx.logger.info({ experimentId: id, status: input.status }, "experiment status changed");
  return experimentViewOf(ctx, updated);
}
