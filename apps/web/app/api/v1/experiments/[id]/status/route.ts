import { readJson } from "../../../../../../src/server/http/json-body.ts";
import { json, route } from "../../../../../../src/server/http/route.ts";
import { requireUserForMutation } from "../../../../../../src/server/http/session.ts";
import { setExperimentStatus } from "../../../../../../src/server/services/set-experiment-status.ts";
import { setExperimentStatusInputSchema } from "../../../../../../src/api/schemas/experiments.ts";

/** POST /api/v1/experiments/{id}/status: the organizer pauses or resumes the run. */
export const POST = route<{ id: string }>(async ({ req, params, ctx }) => {
  const user = await requireUserForMutation(req, ctx);
  const input = await readJson(req, setExperimentStatusInputSchema);
  return json(await setExperimentStatus(ctx, user, params.id, input));
});
