import { readJson } from "../../../../src/server/http/json-body.ts";
import { json, route } from "../../../../src/server/http/route.ts";
import { requireUserForMutation } from "../../../../src/server/http/session.ts";
import { createExperiment } from "../../../../src/server/services/create-experiment.ts";
import { listExperiments } from "../../../../src/server/services/read-experiment.ts";
import { createExperimentInputSchema } from "../../../../src/api/schemas/experiments.ts";

/** GET /api/v1/experiments: every experiment, newest first. */
export const GET = route(async ({ ctx }) => json({ experiments: await listExperiments(ctx) }));

/** POST /api/v1/experiments: publish a run; the caller becomes its organizer. */
export const POST = route(async ({ req, ctx }) => {
  const user = await requireUserForMutation(req, ctx);
  const input = await readJson(req, createExperimentInputSchema);
  return json(await createExperiment(ctx, user, input), { status: 201 });
});
