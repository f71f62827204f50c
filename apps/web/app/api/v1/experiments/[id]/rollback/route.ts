import { readJson } from "../../../../../../src/server/http/json-body.ts";
import { json, route } from "../../../../../../src/server/http/route.ts";
import { requireUserForMutation } from "../../../../../../src/server/http/session.ts";
import { rollBackExperiment } from "../../../../../../src/server/services/roll-back-experiment.ts";
import { rollBackExperimentInputSchema } from "../../../../../../src/api/schemas/experiments.ts";

/** POST /api/v1/experiments/{id}/rollback: the organizer rolls the run back to a checkpoint. */
export const POST = route<{ id: string }>(async ({ req, params, ctx }) => {
  const user = await requireUserForMutation(req, ctx);
  const input = await readJson(req, rollBackExperimentInputSchema);
  return json(await rollBackExperiment(ctx, user, params.id, input));
});
