import { getDatasetFile } from "../../../../../../../src/server/datasets/dataset-store.ts";
import { objectResponse } from "../../../../../../../src/server/http/byte-range.ts";
import { route } from "../../../../../../../src/server/http/route.ts";

/**
 * GET /api/v1/datasets/{name}/shards/{file}: a shard (or the vocabulary) named in the manifest,
 * with Range support. Public and cacheable: the ETag is the file's sha256.
 */
export const GET = route<{ name: string; file: string }>(async ({ req, params, ctx }) => {
  const file = await getDatasetFile(ctx.storage, params.name, params.file);
  return objectResponse(req, {
    storage: ctx.storage,
    key: file.key,
    size: file.size,
    contentType: file.contentType,
    etag: file.sha256,
    cacheControl: "public, max-age=3600",
  });
});
