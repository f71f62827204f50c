import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { build } from "esbuild";

/**
 * Bundles `worker-node-entry.ts` for the browser into a new temporary directory, as
 * `worker-node.js` (the name `worker-page-entry.ts` loads it by): serve that file with BrowserLab.
 * Returns the file and its directory (the caller removes it).
 */
export async function bundleWorkerNode(): Promise<{ file: string; directory: string }> {
  const directory = await mkdtemp(join(tmpdir(), "worker-node-"));
  await build({
    entryPoints: { "worker-node": new URL("worker-node-entry.ts", import.meta.url).pathname },
    outdir: directory,
    bundle: true,
    platform: "browser",
    format: "esm",
    logLevel: "error",
    external: ["node:*"],
  });
  return { file: join(directory, "worker-node.js"), directory };
}
