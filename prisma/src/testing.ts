import { execFile } from "node:child_process";
import { copyFile, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import pg from "pg";
import type { DatabaseProvider } from "./client.ts";

/**
 * Throwaway databases for integration tests: a temporary SQLite file, or a new database on the
 * PostgreSQL server that `npm test` starts (BARNRAISE_TEST_POSTGRES_URL). Both are migrated with
 * the real migrations through the Prisma CLI.
 */

const run = promisify(execFile);
const repoRoot = resolve(import.meta.dirname, "../..");

export interface TestDatabase {
  readonly provider: DatabaseProvider;
  readonly url: string;
  dispose(): Promise<void>;
}

/** The providers to test on. CI must not silently skip PostgreSQL, so its absence is an error there. */
export function testDatabaseProviders(): DatabaseProvider[] {
  const postgresUrl = process.env.BARNRAISE_TEST_POSTGRES_URL;
  if (postgresUrl === undefined && process.env.CI !== undefined) {
    throw new Error("BARNRAISE_TEST_POSTGRES_URL is not set: the PostgreSQL tests cannot run");
  }
  return postgresUrl === undefined ? ["sqlite"] : ["sqlite", "postgresql"];
}

/** A new, empty database of `provider` (not yet migrated). */
export async function openTestDatabase(provider: DatabaseProvider): Promise<TestDatabase> {
  if (provider === "sqlite") {
    const dir = await mkdtemp(join(tmpdir(), "barnraise-db-"));
    return {
      provider,
      url: `file:${join(dir, "test.db")}`,
      dispose: () => rm(dir, { recursive: true, force: true }),
    };
  }
  const serverUrl = process.env.BARNRAISE_TEST_POSTGRES_URL;
  if (serverUrl === undefined) throw new Error("BARNRAISE_TEST_POSTGRES_URL is not set");
  return createPostgresDatabase(serverUrl, "");
}

async function createPostgresDatabase(serverUrl: string, options: string): Promise<TestDatabase> {
  const name = `test_${Date.now()}_${Math.floor(Math.random() * 1e9)}`;
  const admin = new pg.Client({ connectionString: serverUrl });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name} ${options}`);
  } finally {
    await admin.end();
  }
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return {
    provider: "postgresql",
    url: url.toString(),
    async dispose() {
      const client = new pg.Client({ connectionString: serverUrl });
      await client.connect();
      await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await client.end();
    },
  };
}

/** Applies the migrations with `prisma migrate deploy`; returns the CLI's output. */
export async function migrateTestDatabase(url: string): Promise<string> {
  const { stdout } = await run("prisma", ["migrate", "deploy"], {
    cwd: repoRoot,
    env: { ...process.env, DATABASE_URL: url },
  });
  return stdout;
}

declare module "vitest" {
  interface ProvidedContext {
    testDatabaseTemplates: TestDatabaseTemplates;
  }
}

/** Migrated, never-connected databases that test databases are cloned from (one migration per run). */
export interface TestDatabaseTemplates {
  /** A migrated SQLite file, copied for each test database. */
  readonly sqlite: string;
  /** A migrated PostgreSQL database name, used as `CREATE DATABASE … TEMPLATE`; null without PostgreSQL. */
  readonly postgresql: string | null;
}

/** Makes the templates (vitest's global setup calls this once per run); `dispose` drops them. */
export async function createTestDatabaseTemplates(): Promise<{
  templates: TestDatabaseTemplates;
  dispose(): Promise<void>;
}> {
  const providers = testDatabaseProviders();
  const sqlite = await openTestDatabase("sqlite");
  await migrateTestDatabase(sqlite.url);
  let postgres: TestDatabase | null = null;
  if (providers.includes("postgresql")) {
    postgres = await openTestDatabase("postgresql");
    await migrateTestDatabase(postgres.url);
  }
  return {
    templates: {
      sqlite: sqlite.url.slice("file:".length),
      postgresql: postgres === null ? null : new URL(postgres.url).pathname.slice(1),
    },
    async dispose() {
      await sqlite.dispose();
      await postgres?.dispose();
    },
  };
}

/** A new database of `provider` with the migrations applied, cloned from the run's template. */
export async function openMigratedTestDatabase(
  provider: DatabaseProvider,
  templates: TestDatabaseTemplates,
): Promise<TestDatabase> {
  if (provider === "sqlite") {
    const dir = await mkdtemp(join(tmpdir(), "barnraise-db-"));
    const file = join(dir, "test.db");
    await copyFile(templates.sqlite, file);
    return { provider, url: `file:${file}`, dispose: () => rm(dir, { recursive: true, force: true }) };
  }
  const serverUrl = process.env.BARNRAISE_TEST_POSTGRES_URL;
  if (serverUrl === undefined || templates.postgresql === null) {
    throw new Error("BARNRAISE_TEST_POSTGRES_URL is not set");
  }
  return createPostgresDatabase(serverUrl, `TEMPLATE ${templates.postgresql}`);
}
