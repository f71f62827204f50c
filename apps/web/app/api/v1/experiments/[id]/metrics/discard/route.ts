import { readJson } from "../../../../../../../src/server/http/json-body.ts";
import { json, route } from "../../../../../../../src/server/http/route.ts";
import { requireUserForMutation } from "../../../../../../../src/server/http/session.ts";
import { discardMetricPoints } from "../../../../../../../src/server/services/discard-metric-points.ts";
import { discardMetricPointsInputSchema } from "../../../../../../../src/api/schemas/experiments.ts";

/** POST /api/v1/experiments/{id}/metrics/discard: the organizer discards or restores loss-curve points. */
export const POST = route<{ id: string }>(async ({ req, params, ctx }) => {
  const user = await requireUserForMutation(req, ctx);
  const input = await readJson(req, discardMetricPointsInputSchema);
  return json(await discardMetricPoints(ctx, user, params.id, input));
});
