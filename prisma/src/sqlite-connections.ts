import type { Client, Config } from "@libsql/client";
import { PrismaLibSQL } from "@prisma/adapter-libsql";

/**
 * SQLite settings that live on each connection, not in the file:
 *
 * - `busy_timeout`: a writer that finds the database locked by another process (a second platform
 *   process, `prepare-datasets`, a backup) waits up to 5 s instead of failing at once with
 *   SQLITE_BUSY. The wait blocks this process (libSQL calls are synchronous), so a process keeps one
 *   client: Prisma's adapter runs its queries one at a time, and never waits on itself.
 * - `synchronous = NORMAL`: in WAL mode a commit appends to the log without waiting for the disk;
 *   the log is synced at checkpoints. The database cannot be corrupted this way, and a process crash
 *   loses nothing; a power cut may lose the last commits. SQLite recommends it with WAL; it makes a
 *   write about ten times cheaper here.
 */
export const SQLITE_CONNECTION_PRAGMAS = ["PRAGMA busy_timeout = 5000", "PRAGMA synchronous = NORMAL"];

/**
 * Prisma's libSQL adapter, with SQLITE_CONNECTION_PRAGMAS applied to every connection it uses.
 *
 * @libsql/client opens its connection lazily and, after each transaction it starts, drops it and
 * opens a new one on next use (the transaction keeps the old one), and it takes no pragmas. So the
 * client is wrapped: before the first statement, and before the first one after a transaction
 * started, the pragmas run on the connection that statement is about to use. Prisma's adapter runs
 * one operation at a time (a mutex), so nothing slips in between.
 */
export class TunedPrismaLibSQL extends PrismaLibSQL {
  override createClient(config: Config): Client {
    return withConnectionPragmas(super.createClient(config), SQLITE_CONNECTION_PRAGMAS);
  }
}

const USES_CONNECTION = new Set<PropertyKey>([
  "execute",
  "batch",
  "executeMultiple",
  "transaction",
  "migrate",
]);

export function withConnectionPragmas(client: Client, pragmas: readonly string[]): Client {
  let fresh = true;
  const prepare = async () => {
    if (!fresh) return;
    for (const pragma of pragmas) await client.execute(pragma);
    fresh = false;
  };
  return new Proxy(client, {
    get(target, property, receiver) {
      const value: unknown = Reflect.get(target, property, receiver);
      if (typeof value !== "function") return value;
      // Called on the client itself, whose methods use its private fields.
      if (!USES_CONNECTION.has(property)) return (value as (...a: unknown[]) => unknown).bind(target);
      return async (...args: unknown[]) => {
        await prepare();
        const result: unknown = await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
        // The client opens a new connection for whatever comes after a transaction.
        if (property === "transaction") fresh = true;
        return result;
      };
    },
  });
}
