import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { join } from "node:path";
import { readBoundedBytes } from "@barnraise/swarm";
import { z } from "zod";
import type { WebGpuAdapter } from "../tf/backend.ts";

/**
 * WebGPU for TF.js in Node (DESIGN §5): `@tensorflow/tfjs-backend-webgpu` on Dawn's Node binding
 * (the `webgpu` package, prebuilt for Linux, macOS and Windows; nothing to compile, no CUDA).
 *
 * Dawn picks the platform's native API first (Vulkan on Linux, Metal on macOS, D3D12 on Windows),
 * which is what a volunteer's real GPU runs on. Where that finds no adapter on Linux (no Vulkan
 * driver, or one Dawn refuses, like Debian 12's lavapipe) it tries OpenGL ES through EGL, which runs
 * on Mesa's software rasterizer too: slow, but a real WebGPU path, which is how CI tests it.
 *
 * In a clone the binding comes from the installed `webgpu` package. The program the platform serves
 * leaves it out (21 MB per platform); there the peer fetches its platform's `dawn.node` from the
 * platform's catalog into its data directory, checked against the catalog's SHA-256.
 */

/** What Dawn's `dawn.node` exports. */
interface DawnBinding {
  create(flags: string[]): GpuLike;
  globals: Record<string, unknown>;
}

/** The parts of the WebGPU `GPU` object used here. */
interface GpuLike {
  requestAdapter(options?: Record<string, unknown>): Promise<AdapterLike | null>;
  readonly wgslLanguageFeatures?: unknown;
}

interface AdapterLike {
  readonly info?: { vendor?: string; architecture?: string; device?: string; description?: string };
}

/** Where Dawn's binding comes from when the `webgpu` package is not installed. */
export interface DawnAddonSource {
  /** The platform the peer joined; its catalog lists the add-on's files. */
  readonly server: URL;
  /** Where fetched add-ons are kept (the peer's data directory). */
  readonly directory: string;
  readonly signal?: AbortSignal;
  /** Told once when the add-on is fetched. */
  readonly log?: (line: string) => void;
}

export interface WebGpuLoaderOptions {
  /** Used only when `import("webgpu")` finds no package (the served program). */
  readonly addon?: DawnAddonSource;
}

/** The adapter the backend runs on, for the start-up line. */
/** A TF.js backend loader for WebGPU; resolves to the adapter it found. */
export function createWebGpuLoader(options: WebGpuLoaderOptions = {}): () => Promise<WebGpuAdapter> {
  let loaded: Promise<WebGpuAdapter> | undefined;
  return () => (loaded ??= loadWebGpu(options));
}

async function loadWebGpu(options: WebGpuLoaderOptions): Promise<WebGpuAdapter> {
  const dawn = await loadDawn(options.addon);
  Object.assign(globalThis, dawn.globals);
  const found = await findAdapter(dawn);
  const gpu = {
    // TF.js asks for a high-performance adapter; it gets the one found here.
    requestAdapter: () => Promise.resolve(found.adapter),
    getPreferredCanvasFormat: () => "rgba8unorm",
    wgslLanguageFeatures: found.gpu.wgslLanguageFeatures ?? new Set(),
  };
  // Node has a `navigator` without `gpu`; plain assignment to it throws.
  Object.defineProperty(globalThis.navigator, "gpu", { value: gpu, configurable: true });
  // Registers the "webgpu" backend only when navigator.gpu exists, so it is imported after.
  await import("@tensorflow/tfjs-backend-webgpu");
  return { api: found.api, description: describeAdapter(found.adapter) };
}

/** Tries Dawn's native API, then (Linux) OpenGL ES, each with a core and a compatibility adapter. */
async function findAdapter(dawn: DawnBinding): Promise<{ gpu: GpuLike; adapter: AdapterLike; api: string }> {
  const attempts: { api: string; flags: string[] }[] = [{ api: nativeApi(), flags: [] }];
  if (process.platform === "linux") {
    // EGL without a display: Mesa reads this when Dawn opens EGL.
    process.env.EGL_PLATFORM ??= "surfaceless";
    attempts.push({ api: "opengles", flags: ["backend=opengles"] });
  }
  const tried: string[] = [];
  for (const attempt of attempts) {
    const gpu = dawn.create(attempt.flags);
    const adapter =
      (await gpu.requestAdapter({ powerPreference: "high-performance" })) ??
      (await gpu.requestAdapter({ powerPreference: "high-performance", featureLevel: "compatibility" }));
    if (adapter !== null) return { gpu, adapter, api: attempt.api };
    tried.push(attempt.api);
  }
  throw new Error(
    `Dawn found no WebGPU adapter (tried ${tried.join(", ")}): no GPU driver it can use` +
      (process.platform === "linux"
        ? " (install the GPU's Vulkan driver, or Mesa's EGL: libegl1 libegl-mesa0)"
        : ""),
  );
}

function nativeApi(): string {
  if (process.platform === "darwin") return "metal";
  if (process.platform === "win32") return "d3d12";
  return "vulkan";
}

function describeAdapter(adapter: AdapterLike): string {
  const info = adapter.info ?? {};
  const parts = [info.vendor, info.architecture, info.device, info.description].filter(
    (part): part is string => typeof part === "string" && part.length > 0,
  );
  return [...new Set(parts)].join(" ") || "unnamed adapter";
}

/** The binding from the `webgpu` package, else from the platform's add-on. */
async function loadDawn(addon: DawnAddonSource | undefined): Promise<DawnBinding> {
  try {
    return (await import(/* @vite-ignore */ packageName())) as DawnBinding;
  } catch (error) {
    if (!isMissingPackage(error)) throw error;
    if (addon === undefined)
      throw new Error("Dawn's binding (the `webgpu` package) is not installed", { cause: error });
  }
  const path = await fetchDawnAddon(addon);
  return createRequire(import.meta.url)(path) as DawnBinding;
}

/** A variable, so the served bundle keeps the import dynamic (the package is left out of it). */
function packageName(): string {
  return "webgpu";
}

function isMissingPackage(error: unknown): boolean {
  const code = typeof error === "object" && error !== null && "code" in error ? error.code : undefined;
  return code === "ERR_MODULE_NOT_FOUND" || code === "MODULE_NOT_FOUND";
}

/** This machine's platform as the `webgpu` package names its builds. */
export function dawnPlatform(): string {
  return process.platform === "darwin" ? "darwin-universal" : `${process.platform}-${process.arch}`;
}

const MAX_ADDON_FILE_BYTES = 256 * 2 ** 20;

const catalogSchema = z.object({
  addons: z
    .array(
      z.object({
        name: z.string(),
        version: z.string(),
        platform: z.string(),
        files: z.array(
          z.object({
            name: z.string().regex(/^[A-Za-z0-9_][A-Za-z0-9_.-]*$/),
            url: z.url(),
            bytes: z.number().int().positive().max(MAX_ADDON_FILE_BYTES),
            sha256: z.string().regex(/^[0-9a-f]{64}$/),
          }),
        ),
      }),
    )
    .default([]),
});

/**
 * Fetches this platform's Dawn binding from the platform's catalog into
 * `<directory>/webgpu-<version>-<platform>-<sha12>/`, each file checked against the catalog's SHA-256
 * and written through a rename; a later start finds it there and checks it again. Returns the path
 * of `dawn.node`.
 */
export async function fetchDawnAddon(source: DawnAddonSource): Promise<string> {
  const platform = dawnPlatform();
  const catalogUrl = new URL("/api/v1/programs", source.server);
  const response = await fetch(catalogUrl, { signal: source.signal ?? null, redirect: "error" });
  if (!response.ok) throw new Error(`the platform's program catalog answered ${response.status}`);
  const text = await readBoundedBytes(response, 1 << 20);
  if (text === undefined) throw new Error("the platform's program catalog is over 1 MiB");
  const catalog = catalogSchema.parse(JSON.parse(new TextDecoder().decode(text)));
  const addon = catalog.addons.find((a) => a.name === "webgpu" && a.platform === platform);
  const dawn = addon?.files.find((file) => file.name === "dawn.node");
  if (addon === undefined || dawn === undefined) {
    throw new Error(`the platform serves no WebGPU binding for ${platform}`);
  }
  const directory = join(source.directory, `webgpu-${addon.version}-${platform}-${dawn.sha256.slice(0, 12)}`);
  await mkdir(directory, { recursive: true });
  for (const file of addon.files) {
    const path = join(directory, file.name);
    if (existsSync(path) && sha256Hex(await readFile(path)) === file.sha256) continue;
    source.log?.(
      `fetching the WebGPU binding for ${platform}: ${file.name}, ${(file.bytes / 2 ** 20).toFixed(1)} MiB`,
    );
    const download = await fetch(file.url, { signal: source.signal ?? null, redirect: "error" });
    if (!download.ok) throw new Error(`fetching ${file.url} answered ${download.status}`);
    const bytes = await readBoundedBytes(download, file.bytes);
    if (bytes?.length !== file.bytes || sha256Hex(bytes) !== file.sha256) {
      throw new Error(`${file.url} does not match the SHA-256 the platform's catalog gives`);
    }
    const temporary = `${path}.${process.pid}.tmp`;
    try {
      await writeFile(temporary, bytes, { mode: 0o755 });
      await rename(temporary, path);
    } finally {
      await rm(temporary, { force: true });
    }
  }
  return join(directory, "dawn.node");
}

function sha256Hex(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}
