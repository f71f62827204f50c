import type { Client, Config, InStatement, ResultSet, Transaction, TransactionMode } from "@libsql/client";
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
 * Prisma's libSQL adapter on one SQLite connection, with SQLITE_CONNECTION_PRAGMAS applied to it.
 *
 * @libsql/client opens its connection lazily and takes no pragmas, so the pragmas run before the
 * first statement. It also hands its connection to each transaction it starts and opens a new one
 * for whatever comes next; each new connection reads the schema again and needs the pragmas again,
 * and the old one lingers until it is garbage-collected. That cost a third of a metric report's
 * database time. So transactions run on the client's own connection instead: Prisma's adapter holds
 * its lock from a transaction's start to its commit or rollback, so no other statement of this
 * client can run in between.
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
      if (property === "transaction") {
        return async (mode: TransactionMode = "write") => {
          await prepare();
          await target.execute(BEGIN[mode]);
          return new SameConnectionTransaction(target);
        };
      }
      return async (...args: unknown[]) => {
        await prepare();
        const result: unknown = await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
        return result;
      };
    },
  });
}

const BEGIN: Record<TransactionMode, string> = {
  write: "BEGIN IMMEDIATE",
  read: "BEGIN TRANSACTION READONLY",
  deferred: "BEGIN DEFERRED",
};

/** A transaction begun on `client`'s own connection; nothing else may use the client until it ends. */
class SameConnectionTransaction implements Transaction {
  readonly #client: Client;
  #closed = false;

  constructor(client: Client) {
    this.#client = client;
  }

  get closed(): boolean {
    return this.#closed;
  }

  async execute(stmt: InStatement): Promise<ResultSet> {
    this.#checkOpen();
    return this.#client.execute(stmt);
  }

  async batch(stmts: InStatement[]): Promise<ResultSet[]> {
    const results: ResultSet[] = [];
    for (const stmt of stmts) results.push(await this.execute(stmt));
    return results;
  }

  executeMultiple(): Promise<void> {
    // The client's executeMultiple rolls back whatever transaction is open when it returns.
    return Promise.reject(new Error("executeMultiple is not available inside a transaction"));
  }

  async commit(): Promise<void> {
    this.#checkOpen();
    try {
      await this.#client.execute("COMMIT");
      this.#closed = true;
    } catch (error) {
      // Never leave the connection inside a transaction that later statements would join.
      await this.rollback().catch(() => undefined);
      throw error;
    }
  }

  async rollback(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#client.execute("ROLLBACK");
  }

  close(): void {
    void this.rollback().catch(() => {
      // No transaction was open any more (SQLite ends one itself on some errors).
    });
  }

  #checkOpen(): void {
    if (this.#closed) throw new Error("the transaction is closed");
  }
}
