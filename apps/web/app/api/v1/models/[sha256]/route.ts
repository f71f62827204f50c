import { json, route } from "../../../../../src/server/http/route.ts";
import { readStoredModelSummary } from "../../../../../src/server/models/model-store.ts";

/** GET /api/v1/models/{sha256}: an uploaded model's input shape, output and size. Public. */
export const GET = route<{ sha256: string }>(async ({ params, ctx }) =>
  json({ model: await readStoredModelSummary(ctx.storage, params.sha256) }),
);
