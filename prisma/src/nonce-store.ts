import type { NonceStore } from "@barnraise/protocol";
import type DataLoader from "dataloader";
import type { Database } from "./client.ts";
import { groupCommit } from "./group-commit.ts";
import { Prisma } from "../generated/sqlite/client.ts";

/** Nonces per INSERT statement: 2 parameters each, well below SQLite's and PostgreSQL's limits. */
const NONCES_PER_STATEMENT = 256;

interface NonceClaim {
  readonly key: string;
  readonly expiresAt: number;
  readonly now: number;
}

/**
 * The replay guard's nonce store in the database, so that every web instance shares one window.
 * The primary key makes `add` atomic: of two instances inserting the same nonce, one fails.
 *
 * Every signed request lands here, so claims are group-committed: those that arrive while one INSERT
 * runs go together in the next, whose RETURNING names the nonces it recorded. A nonce named twice in
 * one batch is recorded for its first claim only; a nonce already recorded counts as new only if
 * its entry has expired, and only one caller may renew it.
 */
export class DatabaseNonceStore implements NonceStore {
  readonly #db: Database;
  readonly #claims: DataLoader<NonceClaim, boolean>;
  #nextSweep = 0;

  constructor(db: Database) {
    this.#db = db;
    this.#claims = groupCommit((claims) => this.#claim(claims), { maxBatchSize: NONCES_PER_STATEMENT });
  }

  add(key: string, expiresAt: number, now: number): Promise<boolean> {
    return this.#claims.load({ key, expiresAt, now });
  }

  async #claim(claims: readonly NonceClaim[]): Promise<boolean[]> {
    const now = Math.max(...claims.map((claim) => claim.now));
    if (now >= this.#nextSweep) {
      this.#nextSweep = now + 60_000;
      await this.#db.usedNonce.deleteMany({ where: { expiresAt: { lte: new Date(now) } } });
    }
    const first = new Map<string, NonceClaim>();
    for (const claim of claims) if (!first.has(claim.key)) first.set(claim.key, claim);
    // Raw SQL: one statement for the whole batch, without Prisma's query compilation.
    const values = [...first.values()].map(
      (claim) => Prisma.sql`(${claim.key}, ${new Date(claim.expiresAt)})`,
    );
    const recorded = new Set(
      (
        await this.#db.$queryRaw<{ key: string }[]>`
          INSERT INTO "UsedNonce" ("key", "expiresAt") VALUES ${Prisma.join(values)}
          ON CONFLICT ("key") DO NOTHING RETURNING "key"`
      ).map((row) => row.key),
    );
    const renewed = new Set<string>();
    for (const claim of first.values()) {
      if (recorded.has(claim.key)) continue;
      // Seen before: it counts as new only if that entry has expired, and only one caller may renew it.
      const renewal = await this.#db.usedNonce.updateMany({
        where: { key: claim.key, expiresAt: { lte: new Date(claim.now) } },
        data: { expiresAt: new Date(claim.expiresAt) },
      });
      if (renewal.count === 1) renewed.add(claim.key);
    }
    return claims.map(
      (claim) => first.get(claim.key) === claim && (recorded.has(claim.key) || renewed.has(claim.key)),
    );
  }
}

/** Whether a Prisma error is a unique-constraint violation (P2002), on either database. */
export function isUniqueViolation(error: unknown): boolean {
  return typeof error === "object" && error !== null && (error as { code?: unknown }).code === "P2002";
}
