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

/** An add-on file's served name: `<addon>-<version>-<platform>-<sha12>-<name>`. */
const ADDON_FILE = /^[a-z0-9]+-[0-9A-Za-z.+-]+-[a-z0-9]+-[a-z0-9]+-[0-9a-f]{12}-[A-Za-z0-9_][A-Za-z0-9_.-]*$/;

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
  addons: z
    .array(
      z.object({
        name: z.literal("webgpu"),
        version: z.string().min(1).max(64),
        platform: z.string().regex(/^[a-z0-9]+-[a-z0-9]+$/),
        files: z
          .array(
            z.object({
              name: z.string().regex(/^[A-Za-z0-9_][A-Za-z0-9_.-]*$/),
              file: z.string().regex(ADDON_FILE),
              bytes: z.number().int().positive(),
              sha256: sha256Schema,
            }),
          )
          .min(1),
      }),
    )
    .default([]),
  tab: z
    .object({
      worker: tabFileSchema(/^volunteer-worker-[0-9a-f]{12}\.js$/),
      wasm: z.array(tabFileSchema(/^(tfjs-backend-wasm(-simd)?|highs)\.wasm$/)).min(1),
    })
    .optional(),
});

function tabFileSchema(name: RegExp) {
  return z.object({ file: z.string().regex(name), bytes: z.number().int().positive(), sha256: sha256Schema });
}

export interface ServedProgram {
  readonly name: ProgramName;
  readonly version: string;
  /** The content-addressed tarball name, e.g. `barnraise-peer-0.1.0-2d80298be993.tgz`. */
  readonly file: string;
  readonly bytes: number;
  readonly sha256: string;
}

/** One file of an add-on, e.g. Dawn's `dawn.node` for one platform. */
export interface ServedAddonFile {
  /** The name the add-on loads it by (`dawn.node`, a DLL beside it). */
  readonly name: string;
  /** The content-addressed name it is served by. */
  readonly file: string;
  readonly bytes: number;
  readonly sha256: string;
}

/**
 * A native add-on the peer fetches from the platform when it needs it: the WebGPU binding (Dawn)
 * for one platform (`linux-x64`, `darwin-universal`, `win32-x64`, …). It is not in the program's
 * tarball, which stays small and the same for every platform.
 */
export interface ServedAddon {
  readonly name: "webgpu";
  readonly version: string;
  readonly platform: string;
  readonly files: readonly ServedAddonFile[];
}

/** A file of what a browser tab runs to contribute (its worker, the wasm backend's binaries). */
export interface ServedTabFile {
  readonly file: string;
  readonly bytes: number;
  readonly sha256: string;
}

/** What a browser tab runs when its volunteer contributes from the experiment page. */
export interface ServedTab {
  readonly worker: ServedTabFile;
  readonly wasm: readonly ServedTabFile[];
}

export interface ProgramCatalog {
  /** The wire-format version of the programs (PROTOCOL_VERSION of @barnraise/protocol). */
  readonly protocolVersion: number;
  readonly programs: readonly ServedProgram[];
  readonly addons: readonly ServedAddon[];
  /** Absent from a manifest built before tabs could contribute. */
  readonly tab?: ServedTab | undefined;
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
  return servedFileUrl(origin, program.file);
}

/** The add-on file a request names by its content-addressed name, or undefined. */
export function findServedAddonFile(catalog: ProgramCatalog, file: string): ServedAddonFile | undefined {
  for (const addon of catalog.addons) {
    const found = addon.files.find((f) => f.file === file);
    if (found !== undefined) return found;
  }
  return undefined;
}

/** The absolute URL of a served file under `origin`. */
export function servedFileUrl(origin: string, file: string): string {
  return `${origin}${PROGRAMS_PATH}/${file}`;
}

/** Where the tab's files are served, under the platform's origin. */
export const TAB_PATH = "/api/v1/tab";

/** The tab file a request names, or NOT_FOUND (a request never reaches another file). */
export function findServedTabFile(catalog: ProgramCatalog, file: string): ServedTabFile {
  const tab = catalog.tab;
  const found = tab === undefined ? undefined : [tab.worker, ...tab.wasm].find((f) => f.file === file);
  if (found === undefined) throw new AppError(AppErrorCode.NOT_FOUND, `no tab file "${file}" is served here`);
  return found;
}

/**
 * What the worker may do, and nothing else: run its own script and compile the wasm backend
 * (`'wasm-unsafe-eval'`, no `eval`), fetch from the platform (the join with the page's session, the
 * dataset's shards, models and checkpoints, the wasm binaries), and open WebSockets to the swarm's
 * members, whose addresses are wherever their volunteers are: secure ones only when the platform
 * (`origin`) is served over HTTPS, as the browser allows no other from there. A dedicated worker's
 * policy is the one delivered with its script.
 */
export function tabWorkerCsp(origin: string): string {
  const sockets = new URL(origin).protocol === "https:" ? "wss:" : "ws: wss:";
  return [
    "default-src 'none'",
    "script-src 'self' 'wasm-unsafe-eval'",
    `connect-src 'self' ${sockets}`,
    "worker-src 'none'",
    "base-uri 'none'",
    "form-action 'none'",
  ].join("; ");
}
