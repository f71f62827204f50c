import { execFile } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
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
  const name = `test_${Date.now()}_${Math.floor(Math.random() * 1e6)}`;
  const admin = new pg.Client({ connectionString: serverUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return {
    provider,
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
