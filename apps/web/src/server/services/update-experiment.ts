import { experimentConfigSchema } from "@barnraise/protocol";
import { z } from "zod";
import type { AppContext } from "../context.ts";
import type { SessionUser } from "../http/session.ts";
import {
  canonicalConfigText,
  experimentDescriptionSchema,
  experimentNameSchema,
} from "./create-experiment.ts";
import { requireOrganizer } from "./experiment-access.ts";
import { experimentViewOf, type ExperimentView } from "./read-experiment.ts";

/**
 * The organizer edits an experiment. A config replaces the whole config (omitted fields take their
 * defaults) and bumps `configVersion` only when the complete config actually changed, so peers
 * re-fetch a signed config only when there is something new in it.
 */

export const updateExperimentInputSchema = z.strictObject({
  name: experimentNameSchema.optional(),
  description: experimentDescriptionSchema.optional(),
  config: experimentConfigSchema.optional(),
});
export type UpdateExperimentInput = z.infer<typeof updateExperimentInputSchema>;

export async function updateExperiment(
  ctx: AppContext,
  user: SessionUser,
  id: string,
  input: UpdateExperimentInput,
): Promise<ExperimentView> {
  const experiment = await requireOrganizer(ctx, id, user);
  const data: { name?: string; description?: string; config?: string; configVersion?: { increment: 1 } } = {};
  if (input.name !== undefined && input.name !== experiment.name) data.name = input.name;
  if (input.description !== undefined && input.description !== experiment.description) {
    data.description = input.description;
  }
  if (input.config !== undefined) {
    const text = canonicalConfigText(input.config);
    if (text !== experiment.config) {
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
