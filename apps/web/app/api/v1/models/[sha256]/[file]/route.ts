import { objectResponse } from "../../../../../../src/server/http/byte-range.ts";
import { route } from "../../../../../../src/server/http/route.ts";
import { getStoredModelFile } from "../../../../../../src/server/models/model-store.ts";

/**
 * GET /api/v1/models/{sha256}/{file}: an uploaded model's model.json or its `weights-<sha256>.bin`,
 * as `tf.loadLayersModel` fetches them. Public and immutable: the names are content hashes.
 */
export const GET = route<{ sha256: string; file: string }>(async ({ req, params, ctx }) => {
  const file = await getStoredModelFile(ctx.storage, params.sha256, params.file);
  return objectResponse(req, {
    storage: ctx.storage,
    key: file.key,
    size: file.size,
    contentType: file.contentType,
    etag: file.etag,
    cacheControl: "public, max-age=31536000, immutable",
  });
});
