/**
 * Builds the web app (and the programs it serves) unless nothing it is built from changed since the
 * last build: the demo and the end-to-end tests call this on every start, and `next build` takes
 * over a minute here. The inputs are the web app's sources, the workspace packages, the Prisma schema,
 * package-lock.json and the TypeScript configs; their hash is kept in apps/web/.next.
 *
 *   node scripts/build-web.ts [--force]
 *
 * Operators who deploy build with `npm run build -w @barnraise/web`, which always builds.
 */
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { hashInputs } from "./input-hash.ts";

const root = resolve(import.meta.dirname, "..");
const { values: flags } = parseArgs({ options: { force: { type: "boolean", default: false } } });
const log = (line: string) => process.stdout.write(`[build-web] ${line}\n`);
const run = (command: string, args: readonly string[]) =>
  execFileSync(command, [...args], { cwd: root, stdio: "inherit" });

// The programs keep their own record of what they were built from.
run(process.execPath, ["scripts/build-programs.ts"]);

const nextDir = join(root, "apps/web/.next");
const stamp = join(nextDir, "barnraise-inputs.sha256");
const inputs = hashInputs(root, [
  "apps/web",
  "packages",
  "prisma/schema.prisma",
  "prisma/src",
  "prisma/package.json",
  "package-lock.json",
  "tsconfig.base.json",
  "tsconfig.json",
]);
const built =
  existsSync(join(nextDir, "BUILD_ID")) && existsSync(stamp) && readFileSync(stamp, "utf8") === inputs;
if (built && !flags.force) {
  log("the web app's build is up to date");
} else {
  run("npm", ["run", "build", "--silent", "-w", "@barnraise/web"]);
  writeFileSync(stamp, inputs);
}
