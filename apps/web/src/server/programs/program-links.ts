import type { ProgramLink, ProgramName } from "./program-command.ts";
import type { AppContext } from "../context.ts";
import { programUrl, PROGRAMS_PATH, readProgramCatalog } from "./programs.ts";

/**
 * Where a page's command finds `program` under `origin`; undefined when the platform has no built
 * programs (or a manifest it cannot read, which is logged), so the page falls back to the bare name.
 */
export async function programLink(
  ctx: AppContext,
  program: ProgramName,
  origin: string,
): Promise<ProgramLink | undefined> {
  try {
    const served = (await readProgramCatalog(ctx.env.programsDir))?.programs.find((p) => p.name === program);
    if (served === undefined) return undefined;
    return { url: programUrl(origin, served), installScript: `${origin}${PROGRAMS_PATH}/install.sh` };
  } catch (error) {
    ctx.logger.error({ err: error }, "cannot read the programs manifest");
    return undefined;
  }
}
