import { openApiDocument } from "../../../../src/api/openapi.ts";

/** GET /api/v1/openapi.json: the API description, generated from the routes' zod schemas. */
export function GET(): Response {
  return Response.json(openApiDocument(), { headers: { "cache-control": "public, max-age=300" } });
}
