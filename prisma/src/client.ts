import { resolve } from "node:path";
import { PrismaPg } from "@prisma/adapter-pg";
import { PrismaClient as PostgresClient } from "../generated/postgresql/client.ts";
import { PrismaClient as SqliteClient } from "../generated/sqlite/client.ts";
import { TunedPrismaLibSQL } from "./sqlite-connections.ts";

/**
 * The models are the same for both databases (prisma/postgresql/schema.prisma is generated from
 * prisma/schema.prisma), so the application is typed against one client.
 */
export type Database = SqliteClient;
export type DatabaseProvider = "sqlite" | "postgresql";

export const DEFAULT_DATABASE_URL = `file:${resolve(".data/barnraise.db")}`;

export function databaseProvider(url: string): DatabaseProvider {
  if (/^postgres(ql)?:\/\//.test(url)) return "postgresql";
  if (url.startsWith("file:")) return "sqlite";
  throw new Error("DATABASE_URL must start with file: (SQLite) or postgresql:// (PostgreSQL)");
}

/** A client for the database at `url`: a `file:` URL for SQLite, `postgresql://` for PostgreSQL. */
export function createDatabase(url: string): Database {
  if (databaseProvider(url) === "postgresql") {
    return new PostgresClient({ adapter: new PrismaPg({ connectionString: url }) }) as unknown as Database;
  }
  const client = new SqliteClient({ adapter: new TunedPrismaLibSQL({ url }) });
  // Write-ahead logging: readers no longer wait for a writer, and a commit appends to the log
  // instead of rewriting pages. The mode is kept in the database file, so every later connection
  // (the client opens a new one after each transaction) has it too. Queued before any other query.
  client.$queryRawUnsafe("PRAGMA journal_mode = WAL").catch((error: unknown) => {
    // A client closed at once (a short script) never needed it; anything else is worth a word.
    if (String(error).includes("CLIENT_CLOSED")) return;
    process.emitWarning(`could not switch the SQLite database to WAL mode: ${String(error)}`);
  });
  return client;
}

/** Prisma's SQL template helpers (`Prisma.sql`, `Prisma.join`, `Prisma.raw`), the same for both databases. */
export { Prisma } from "../generated/sqlite/client.ts";
