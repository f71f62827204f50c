import { readBytes } from "../../../../src/server/http/json-body.ts";
import { json, route } from "../../../../src/server/http/route.ts";
import { requireUserForMutation } from "../../../../src/server/http/session.ts";
import { MAX_MODEL_UPLOAD_BYTES } from "../../../../src/server/models/model-store.ts";
import { uploadLayersModel } from "../../../../src/server/services/upload-model.ts";

/**
 * POST /api/v1/models: a signed-in organizer uploads a TF.js Layers model (multipart/form-data: its
 * model.json and weight shards, each a `files` part named as model.json names it). Validated and
 * stored content-addressed; 201 with the model's SHA-256 and shape, or 400 naming the bad file.
 */
export const POST = route(async ({ req, ctx }) => {
  const user = await requireUserForMutation(req, ctx);
  await ctx.rateLimits.consume("modelUpload", user.id);
  const body = await readBytes(req, MAX_MODEL_UPLOAD_BYTES);
  const contentType = req.headers.get("content-type") ?? "";
  const summary = await uploadLayersModel(ctx, contentType, body);
  ctx.metrics.uploads.inc({ kind: "model" });
  ctx.metrics.uploadBytes.inc({ kind: "model" }, body.byteLength);
  return json({ model: summary }, { status: 201 });
});
