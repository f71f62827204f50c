import { join } from "node:path";
import { fileResponse } from "../../../../../src/server/http/byte-range.ts";
import { route } from "../../../../../src/server/http/route.ts";
import { requestOrigin } from "../../../../../src/server/queries/public-origin.ts";
import {
  findServedTabFile,
  requireProgramCatalog,
  tabWorkerCsp,
} from "../../../../../src/server/programs/programs.ts";

/**
 * GET /api/v1/tab/{file}: what a browser tab runs when its volunteer clicks "Contribute from this
 * browser": the Web Worker's bundle, by its content-addressed name (cached for good), and the wasm
 * backend's binaries by the names TF.js asks for (revalidated by their SHA-256).
 */
export const GET = route<{ file: string }>(async ({ req, params, ctx }) => {
  const catalog = await requireProgramCatalog(ctx.env.programsDir);
  const file = findServedTabFile(catalog, params.file);
  const worker = file.file.endsWith(".js");
  const response = await fileResponse(req, {
    path: join(ctx.env.programsDir, "tab", file.file),
    size: file.bytes,
    contentType: worker ? "text/javascript; charset=utf-8" : "application/wasm",
    etag: file.sha256,
    cacheControl: worker ? "public, max-age=31536000, immutable" : "no-cache",
  });
  if (worker) response.headers.set("content-security-policy", tabWorkerCsp(requestOrigin(ctx, req.headers)));
  response.headers.set("x-content-type-options", "nosniff");
  return response;
});
