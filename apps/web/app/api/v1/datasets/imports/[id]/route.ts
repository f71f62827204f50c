import { readDatasetImport } from "../../../../../../src/server/datasets/dataset-imports.ts";
import { json, route } from "../../../../../../src/server/http/route.ts";
import { requireUser } from "../../../../../../src/server/http/session.ts";

/** GET /api/v1/datasets/imports/{id}: an import's status and progress, for the user who started it. */
export const GET = route<{ id: string }>(async ({ req, params, ctx }) => {
  const user = await requireUser(req, ctx);
  return json(await readDatasetImport(ctx, user, params.id));
});
