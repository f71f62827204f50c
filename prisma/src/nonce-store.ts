import type { NonceStore } from "@barnraise/protocol";
import type { Database } from "./client.ts";

/**
 * The replay guard's nonce store in the database, so that every web instance shares one window.
 * The primary key makes `add` atomic: of two instances inserting the same nonce, one fails.
 */
export class DatabaseNonceStore implements NonceStore {
  readonly #db: Database;
  #nextSweep = 0;

  constructor(db: Database) {
    this.#db = db;
  }

  async add(key: string, expiresAt: number, now: number): Promise<boolean> {
    if (now >= this.#nextSweep) {
      this.#nextSweep = now + 60_000;
      await this.#db.usedNonce.deleteMany({ where: { expiresAt: { lte: new Date(now) } } });
    }
    // Raw SQL: every signed request lands here, and this skips Prisma's query compilation.
    const inserted = await this.#db.$executeRaw`
      INSERT INTO "UsedNonce" ("key", "expiresAt") VALUES (${key}, ${new Date(expiresAt)})
      ON CONFLICT ("key") DO NOTHING`;
    if (inserted === 1) return true;
    // Seen before: it counts as new only if that entry has expired, and only one caller may renew it.
    const renewed = await this.#db.usedNonce.updateMany({
      where: { key, expiresAt: { lte: new Date(now) } },
      data: { expiresAt: new Date(expiresAt) },
    });
    return renewed.count === 1;
  }
}

/** Whether a Prisma error is a unique-constraint violation (P2002), on either database. */
export function isUniqueViolation(error: unknown): boolean {
  return typeof error === "object" && error !== null && (error as { code?: unknown }).code === "P2002";
}
