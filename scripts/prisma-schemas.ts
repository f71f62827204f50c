/**
 * Writes prisma/postgresql/schema.prisma from prisma/schema.prisma: the same models, with the
 * PostgreSQL provider and its own generated client. With --check, fails if the copy is stale.
 *
 *   node scripts/prisma-schemas.ts [--check]
 */
import { readFileSync, writeFileSync } from "node:fs";

const source = "prisma/schema.prisma";
const target = "prisma/postgresql/schema.prisma";

const sqlite = readFileSync(source, "utf8");
const postgresql = sqlite
  .replace('provider = "sqlite"', 'provider = "postgresql"')
  .replace('output     = "./generated/sqlite"', 'output     = "../generated/postgresql"')
  .replace(
    /^\/\/ The platform's data\./m,
    `// GENERATED from ${source} by scripts/prisma-schemas.ts; edit that file instead.\n// The platform's data.`,
  );
if (
  postgresql === sqlite ||
  !postgresql.includes('"postgresql"') ||
  !postgresql.includes("generated/postgresql")
) {
  throw new Error(`${source} no longer has the provider and output lines this script rewrites`);
}

if (process.argv.includes("--check")) {
  let current = "";
  try {
    current = readFileSync(target, "utf8");
  } catch {
    // reported below
  }
  if (current !== postgresql) {
    console.error(`${target} is out of date: run node scripts/prisma-schemas.ts`);
    process.exit(1);
  }
} else {
  writeFileSync(target, postgresql);
}
