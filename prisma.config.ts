// Prisma CLI configuration: a Wasm query compiler and a driver adapter, so no native engine is
// downloaded. DATABASE_URL chooses the database: `file:` for SQLite (default `.data/barnraise.db`),
// `postgres://` for PostgreSQL, which uses the schema copy in prisma/postgresql/.
import { existsSync, mkdirSync } from "node:fs";
import { resolve } from "node:path";
import { PrismaLibSQL } from "@prisma/adapter-libsql";
import { PrismaPg } from "@prisma/adapter-pg";
import pg from "pg";
import { defineConfig } from "prisma/config";

if (existsSync(".env")) process.loadEnvFile(".env");
if (process.env.DATABASE_URL === undefined) {
  mkdirSync(".data", { recursive: true });
  process.env.DATABASE_URL = `file:${resolve(".data/barnraise.db")}`;
}
const url = process.env.DATABASE_URL;
const postgres = /^postgres(ql)?:\/\//.test(url);

/**
 * Prisma's schema engine cannot read PostgreSQL catalog columns of type `name` through adapter-pg
 * (prisma/orm#27403), so migrations fail. This client reports them as `text` (and `name[]` as
 * `text[]`), which carry the same strings. Only the CLI uses it; the application does not.
 */
const NAME_OID = 19;
const NAME_ARRAY_OID = 1003;
const TEXT_OID = 25;
const TEXT_ARRAY_OID = 1009;

function nameColumnsAsText(result: pg.QueryResult | pg.QueryResult[] | undefined): void {
  for (const part of Array.isArray(result) ? result : result ? [result] : []) {
    for (const field of part.fields) {
      if (field.dataTypeID === NAME_OID) field.dataTypeID = TEXT_OID;
      if (field.dataTypeID === NAME_ARRAY_OID) field.dataTypeID = TEXT_ARRAY_OID;
    }
  }
}

class CatalogTextClient extends pg.Client {
  // pg's query() has many overloads; the pool calls it with a callback, adapters with promises.
  override query(...args: unknown[]): never {
    const last = args.at(-1);
    if (typeof last === "function") {
      const callback = last as (error: Error | null, result?: pg.QueryResult) => void;
      args[args.length - 1] = (error: Error | null, result?: pg.QueryResult) => {
        nameColumnsAsText(result);
        callback(error, result);
      };
    }
    const returned = (super.query as (...a: unknown[]) => unknown)(...args);
    if (returned instanceof Promise) {
      return returned.then((result: pg.QueryResult) => {
        nameColumnsAsText(result);
        return result;
      }) as never;
    }
    return returned as never;
  }
}

export default defineConfig({
  experimental: { adapter: true },
  engine: "js",
  schema: postgres ? "prisma/postgresql/schema.prisma" : "prisma/schema.prisma",
  adapter: () =>
    Promise.resolve(
      postgres
        ? new PrismaPg({ connectionString: url, Client: CatalogTextClient })
        : new PrismaLibSQL({ url }),
    ),
});
