import { join } from "node:path";
import { fileResponse } from "../../../../../src/server/http/byte-range.ts";
import { route } from "../../../../../src/server/http/route.ts";
import {
  findServedAddonFile,
  findServedProgram,
  requireProgramCatalog,
} from "../../../../../src/server/programs/programs.ts";

/**
 * GET /api/v1/programs/{file}: a program's npm tarball, by its content-addressed name (cached for
 * good: the name changes with the bytes) or by the stable alias `<program>.tgz` for the current
 * build (revalidated by its ETag, the SHA-256); or a file of a native add-on the peer fetches (Dawn's
 * WebGPU binding for one platform), by its content-addressed name.
 */
export const GET = route<{ file: string }>(async ({ req, params, ctx }) => {
  const catalog = await requireProgramCatalog(ctx.env.programsDir);
  const addonFile = findServedAddonFile(catalog, params.file);
  if (addonFile !== undefined) {
    return fileResponse(req, {
      path: join(ctx.env.programsDir, "addons", addonFile.file),
      size: addonFile.bytes,
      contentType: "application/octet-stream",
      etag: addonFile.sha256,
      cacheControl: "public, max-age=31536000, immutable",
    });
  }
  const program = findServedProgram(catalog, params.file);
  return fileResponse(req, {
    path: join(ctx.env.programsDir, program.file),
    size: program.bytes,
    contentType: "application/gzip",
    etag: program.sha256,
    cacheControl: params.file === program.file ? "public, max-age=31536000, immutable" : "no-cache",
  });
});
