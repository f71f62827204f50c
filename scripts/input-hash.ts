import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";

/**
 * A SHA-256 over the names and bytes of build inputs, so a build step can tell that nothing it reads
 * changed since its last run. `paths` are files or directories relative to `root`; directories are
 * walked, leaving out dependencies, build outputs and tests, which no build reads.
 */
export function hashInputs(root: string, paths: readonly string[]): string {
  const hash = createHash("sha256");
  const files = paths.flatMap((path) => walk(root, path)).sort();
  for (const file of files)
    hash
      .update(file)
      .update("\0")
      .update(readFileSync(join(root, file)))
      .update("\0");
  return hash.digest("hex");
}

/** Tests, and files a build writes itself (Next.js rewrites next-env.d.ts on every build). */
const SKIPPED_FILES = /(\.test\.ts|\.tsbuildinfo|^next-env\.d\.ts)$/;
const SKIPPED_DIRECTORIES = new Set(["node_modules", ".next", ".programs", "test", "generated", "dist"]);

function walk(root: string, path: string): string[] {
  const absolute = join(root, path);
  if (!existsSync(absolute)) return [];
  if (!statSync(absolute).isDirectory()) return [path];
  return readdirSync(absolute, { withFileTypes: true }).flatMap((entry) => {
    if (entry.isDirectory() && SKIPPED_DIRECTORIES.has(entry.name)) return [];
    if (entry.isFile() && SKIPPED_FILES.test(entry.name)) return [];
    return walk(root, join(path, entry.name));
  });
}
