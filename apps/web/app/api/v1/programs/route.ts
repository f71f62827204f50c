import { route } from "../../../../src/server/http/route.ts";
import {
  programUrl,
  PROGRAMS_PATH,
  requireProgramCatalog,
  servedFileUrl,
} from "../../../../src/server/programs/programs.ts";
import { requestOrigin } from "../../../../src/server/queries/public-origin.ts";

/**
 * GET /api/v1/programs: the volunteer and aux programs this platform serves, each with its version,
 * tarball URL, size and SHA-256, the protocol version they speak, the install script's URL, and the
 * native add-ons a peer fetches when it needs them (the WebGPU binding per platform).
 */
export const GET = route(async ({ req, ctx }) => {
  const catalog = await requireProgramCatalog(ctx.env.programsDir);
  const origin = requestOrigin(ctx, req.headers);
  return Response.json(
    {
      protocolVersion: catalog.protocolVersion,
      programs: catalog.programs.map((program) => ({ ...program, url: programUrl(origin, program) })),
      installScript: `${origin}${PROGRAMS_PATH}/install.sh`,
      addons: catalog.addons.map((addon) => ({
        ...addon,
        files: addon.files.map((file) => ({ ...file, url: servedFileUrl(origin, file.file) })),
      })),
    },
    { headers: { "cache-control": "no-cache" } },
  );
});
