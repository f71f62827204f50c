import { getDatasetManifest } from "../../../../../src/server/datasets/dataset-store.ts";
import { json, route } from "../../../../../src/server/http/route.ts";

/** GET /api/v1/datasets/{name}: the dataset's manifest (splits, shards with sizes and sha256). */
export const GET = route<{ name: string }>(async ({ params, ctx }) => {
  const manifest = await getDatasetManifest(ctx.storage, params.name);
  return json(manifest, { headers: { "cache-control": "public, max-age=60" } });
});
