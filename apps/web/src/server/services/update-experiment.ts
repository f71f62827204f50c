import { trainedStateConflicts, type ExperimentConfig } from "@barnraise/protocol";
import { AppError, AppErrorCode } from "../app-error.ts";
import type { AppContext } from "../context.ts";
import { canonicalConfigText, storedConfigOf } from "../stored-config.ts";
import { checkModelFitsDataset } from "./check-model-fit.ts";
import { requireOrganizer } from "./experiment-access.ts";
import { experimentViewOf, type ExperimentView } from "./read-experiment.ts";
import type { SessionUser } from "../records.ts";
import type { UpdateExperimentInput } from "../../api/schemas/experiments.ts";

/**
 * The organizer edits an experiment. A config replaces the whole config (omitted fields take their
 * defaults) and bumps `configVersion` only when the complete config actually changed, so peers
 * re-fetch a signed config only when there is something new in it. Once the run has trained (a
 * checkpoint, a step or a contribution is recorded), a config under which its state cannot go on
 * (another model architecture, strategy or shared optimizer) is refused: that is a new experiment.
 * The limits of machines per token and per volunteer apply to joins from then on.
 */

export async function updateExperiment(
  ctx: AppContext,
  user: SessionUser,
  id: string,
  input: UpdateExperimentInput,
): Promise<ExperimentView> {
  const experiment = await requireOrganizer(ctx, id, user);
  const data: {
    name?: string;
    description?: string;
    config?: string;
    configVersion?: { increment: 1 };
    maxNodesPerToken?: number;
    maxNodesPerUser?: number;
  } = {};
  // Limits apply to joins from now on: running machines keep their places.
  if (input.limits !== undefined) {
    if (input.limits.maxNodesPerToken !== experiment.maxNodesPerToken) {
      data.maxNodesPerToken = input.limits.maxNodesPerToken;
    }
    if (input.limits.maxNodesPerUser !== experiment.maxNodesPerUser) {
      data.maxNodesPerUser = input.limits.maxNodesPerUser;
    }
  }
  if (input.name !== undefined && input.name !== experiment.name) data.name = input.name;
  if (input.description !== undefined && input.description !== experiment.description) {
    data.description = input.description;
  }
  if (input.config !== undefined) {
    const text = canonicalConfigText(input.config);
    // Compared as read, not as stored: a config stored in an older form is not a change.
    const stored = storedConfigOf(experiment);
    if (text !== canonicalConfigText(stored)) {
      await refuseStateConflicts(ctx, experiment.id, stored, input.config);
      await checkModelFitsDataset(ctx, input.config);
      data.config = text;
      data.configVersion = { increment: 1 };
    }
  }
  if (Object.keys(data).length === 0) return experimentViewOf(ctx, experiment);
  const updated = await ctx.db.experiment.update({ where: { id }, data });
  ctx.logger.info(
    { experimentId: id, fields: Object.keys(data), configVersion: updated.configVersion },
    "experiment updated",
  );
  return experimentViewOf(ctx, updated);
}

async function refuseStateConflicts(
  ctx: AppContext,
  id: string,
  before: ExperimentConfig,
  after: ExperimentConfig,
): Promise<void> {
  const conflicts = trainedStateConflicts(before, after);
  if (conflicts.length === 0) return;
  const where = { experimentId: id };
  const [checkpoint, metric, contribution] = await Promise.all([
    ctx.db.checkpoint.findFirst({ where, select: { id: true } }),
    ctx.db.metric.findFirst({ where, select: { id: true } }),
    ctx.db.contribution.findFirst({ where, select: { id: true } }),
  ]);
  if (checkpoint === null && metric === null && contribution === null) return;
  throw new AppError(
    AppErrorCode.CONFLICT,
    `the run has already trained, and its state cannot go on under this config (${conflicts
      .map((conflict) => conflict.path)
      .join(", ")}); create a new experiment to train another model or strategy`,
    { issues: conflicts.map((conflict) => ({ path: `config.${conflict.path}`, message: conflict.message })) },
  );
}
