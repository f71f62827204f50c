import { createDatasetImportInputSchema } from "../../../../../src/api/schemas/datasets.ts";
import { createDatasetImport } from "../../../../../src/server/datasets/dataset-imports.ts";
import { readJson } from "../../../../../src/server/http/json-body.ts";
import { json, route } from "../../../../../src/server/http/route.ts";
import { requireUserForMutation } from "../../../../../src/server/http/session.ts";

/**
 * POST /api/v1/datasets/imports: convert the caller's finished upload into a dataset, in the
 * background; 202 with the import, whose progress `GET /api/v1/datasets/imports/{id}` reports.
 */
export const POST = route(async ({ req, ctx }) => {
  const user = await requireUserForMutation(req, ctx);
  const input = await readJson(req, createDatasetImportInputSchema);
  const created = await createDatasetImport(ctx, user, input);
  return json(created, { status: 202, headers: { location: `/api/v1/datasets/imports/${created.id}` } });
});
