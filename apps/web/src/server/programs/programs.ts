import { stat, readFile } from "node:fs/promises";
import { join } from "node:path";
import { z } from "zod";
import { AppError, AppErrorCode } from "../app-error.ts";

/**
 * The volunteer and aux programs this platform serves (DESIGN §5): npm tarballs of bundled
 * JavaScript that scripts/build-programs.ts writes into the programs directory with a
 * `manifest.json`. Volunteers run them with `npx -y <platform>/api/v1/programs/<file>`; the file name
 * carries the start of the tarball's SHA-256, so a copied command always names one exact build.
 */

export const PROGRAM_NAMES = ["barnraise-peer", "barnraise-aux"] as const;
export type ProgramName = (typeof PROGRAM_NAMES)[number];

/** Where the programs are served, under the platform's origin. */
export const PROGRAMS_PATH = "/api/v1/programs";

const sha256Schema = z.string().regex(/^[0-9a-f]{64}$/);

const manifestSchema = z.object({
  protocolVersion: z.number().int().positive(),
  programs: z
    .array(
      z.object({
        name: z.enum(PROGRAM_NAMES),
        version: z.string().min(1).max(64),
        file: z.string().regex(/^[a-z0-9-]+-[0-9A-Za-z.+-]+-[0-9a-f]{12}\.tgz$/),
        bytes: z.number().int().positive(),
        sha256: sha256Schema,
      }),
    )
    .min(1),
});

export interface ServedProgram {
  readonly name: ProgramName;
  readonly version: string;
  /** The content-addressed tarball name, e.g. `barnraise-peer-0.1.0-2d80298be993.tgz`. */
  readonly file: string;
  readonly bytes: number;
  readonly sha256: string;
}

export interface ProgramCatalog {
  /** The wire-format version of the programs (PROTOCOL_VERSION of @barnraise/protocol). */
  readonly protocolVersion: number;
  readonly programs: readonly ServedProgram[];
}

let cached:
  { readonly directory: string; readonly mtimeMs: number; readonly catalog: ProgramCatalog } | undefined;

/**
 * The catalog in `directory`, or undefined when no programs were built there. Re-read when the
 * manifest changes, so a rebuild is served without a restart. A manifest that does not parse is an
 * operator's problem to see in the log, not a volunteer's: it throws.
 */
export async function readProgramCatalog(directory: string): Promise<ProgramCatalog | undefined> {
  const path = join(directory, "manifest.json");
  let mtimeMs: number;
  try {
    mtimeMs = (await stat(path)).mtimeMs;
  } catch (error) {
    if (error instanceof Error && "code" in error && error.code === "ENOENT") return undefined;
    throw error;
  }
  if (cached?.directory === directory && cached.mtimeMs === mtimeMs) return cached.catalog;
  const parsed = manifestSchema.safeParse(JSON.parse(await readFile(path, "utf8")));
  if (!parsed.success) throw new Error(`${path} is not a programs manifest: ${parsed.error.message}`);
  const catalog: ProgramCatalog = parsed.data;
  cached = { directory, mtimeMs, catalog };
  return catalog;
}

/** The catalog, or PROGRAMS_NOT_BUILT with what the operator has to run. */
export async function requireProgramCatalog(directory: string): Promise<ProgramCatalog> {
  const catalog = await readProgramCatalog(directory);
  if (catalog === undefined) {
    throw new AppError(
      AppErrorCode.PROGRAMS_NOT_BUILT,
      "this platform has no built volunteer programs; its operator builds them with `npm run build -w @barnraise/web`",
    );
  }
  return catalog;
}

/**
 * The program a request names: its content-addressed file name, or the stable alias `<name>.tgz`
 * for the current build. Any other name is NOT_FOUND, so a request never reaches another file.
 */
export function findServedProgram(catalog: ProgramCatalog, file: string): ServedProgram {
  const program = catalog.programs.find((p) => p.file === file || `${p.name}.tgz` === file);
  if (program === undefined)
    throw new AppError(AppErrorCode.NOT_FOUND, `no program "${file}" is served here`);
  return program;
}

/** The absolute URL of a program's tarball under `origin`. */
export function programUrl(origin: string, program: ServedProgram): string {
  return `${origin}${PROGRAMS_PATH}/${program.file}`;
}
