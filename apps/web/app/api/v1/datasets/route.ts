import type { DatasetList } from "../../../../src/api/schemas/datasets.ts";
import { listDatasets } from "../../../../src/server/datasets/dataset-store.ts";
import { json, route } from "../../../../src/server/http/route.ts";

/** GET /api/v1/datasets: the prepared datasets. */
export const GET = route(async ({ ctx }) => {
  const body: DatasetList = { datasets: await listDatasets(ctx.storage) };
  return json(body);
});
