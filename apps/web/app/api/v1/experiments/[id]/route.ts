import { readJson } from "../../../../../src/server/http/json-body.ts";
import { json, route } from "../../../../../src/server/http/route.ts";
import { requireUserForMutation } from "../../../../../src/server/http/session.ts";
import { readExperiment } from "../../../../../src/server/services/read-experiment.ts";
import { updateExperiment } from "../../../../../src/server/services/update-experiment.ts";
import { updateExperimentInputSchema } from "../../../../../src/api/schemas/experiments.ts";

/** GET /api/v1/experiments/{id}: the experiment, its complete config and authority public key. */
export const GET = route<{ id: string }>(async ({ params, ctx }) =>
  json(await readExperiment(ctx, params.id)),
);

/** PATCH /api/v1/experiments/{id}: the organizer edits the name, description or config. */
export const PATCH = route<{ id: string }>(async ({ req, params, ctx }) => {
  const user = await requireUserForMutation(req, ctx);
  const input = await readJson(req, updateExperimentInputSchema);
  return json(await updateExperiment(ctx, user, params.id, input));
});
