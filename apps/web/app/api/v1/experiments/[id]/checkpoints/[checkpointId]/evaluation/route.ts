import {
  checkpointEvaluationRequestSchema,
  MAX_SMALL_BODY_BYTES,
} from "../../../../../../../../src/api/schemas/peer.ts";
import { json, route } from "../../../../../../../../src/server/http/route.ts";
import { readSignedJson } from "../../../../../../../../src/server/services/peer-auth.ts";
import { recordCheckpointEvaluation } from "../../../../../../../../src/server/services/record-checkpoint-evaluation.ts";

/**
 * POST /api/v1/experiments/{id}/checkpoints/{checkpointId}/evaluation (signed aux): the checkpoint's
 * held-out evaluation `{ metric, value, loss, samples }` → the checkpoint.
 */
export const POST = route<{ id: string; checkpointId: string }>(async ({ req, params, ctx }) => {
  const { caller, input } = await readSignedJson(
    ctx,
    req,
    params.id,
    checkpointEvaluationRequestSchema,
    MAX_SMALL_BODY_BYTES,
  );
  return json(await recordCheckpointEvaluation(ctx, caller, params.checkpointId, input));
});
