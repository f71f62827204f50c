import { route } from "../../../../../src/server/http/route.ts";
import { installScript } from "../../../../../src/server/programs/install-script.ts";
import { requireProgramCatalog } from "../../../../../src/server/programs/programs.ts";
import { requestOrigin } from "../../../../../src/server/queries/public-origin.ts";

/** GET /api/v1/programs/install.sh: runs a program on a machine that may not have Node.js yet. */
export const GET = route(async ({ req, ctx }) => {
  const catalog = await requireProgramCatalog(ctx.env.programsDir);
  const script = installScript({
    origin: requestOrigin(ctx, req.headers),
    catalog,
    nodeVersion: process.versions.node,
  });
  // It names the origin the request came by: never shared between requests by a cache.
  return new Response(script, {
    headers: { "content-type": "text/x-shellscript; charset=utf-8", "cache-control": "no-store" },
  });
});
