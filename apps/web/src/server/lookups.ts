import type { Database } from "@barnraise/prisma";
import { groupCommit, Prisma } from "@barnraise/prisma";
import type DataLoader from "dataloader";
import type { ExperimentRecord } from "./records.ts";

/** A node's Peer row with its token, as the signed-request routes check it. */
export interface NodeRecord {
  readonly id: string;
  readonly peerId: string;
  readonly userId: string;
  readonly role: string;
  /** The token the node last joined with. */
  readonly tokenId: string;
  readonly token: { readonly revokedAt: Date | null; readonly role: string };
  /** When its owner retired the machine, or null. */
  readonly retiredAt: Date | null;
}

interface NodeRow {
  readonly id: string;
  readonly peerId: string;
  readonly userId: string;
  readonly role: string;
  readonly publicKey: string;
  readonly tokenId: string;
  readonly tokenRevokedAt: Date | string | number | null;
  readonly tokenRole: string;
  readonly retiredAt: Date | string | number | null;
}

export interface NodeKey {
  readonly experimentId: string;
  /** The node's Ed25519 public key, base64url, as stored. */
  readonly publicKey: string;
}

/** Keys per lookup statement. */
const KEYS_PER_LOOKUP = 256;

/**
 * The reads every signed request makes (its experiment, its node), group-committed: the lookups that
 * arrive while one runs go together in the next, one statement for all of them. Nothing is cached:
 * each lookup reads the database after it was asked, so a ban or a revoked token counts for every
 * request that arrives after it was committed.
 */
export class Lookups {
  readonly experiments: DataLoader<string, ExperimentRecord | null>;
  readonly nodes: DataLoader<NodeKey, NodeRecord | null>;

  constructor(db: Database) {
    this.experiments = groupCommit(
      async (ids) => {
        const rows = await db.experiment.findMany({ where: { id: { in: [...new Set(ids)] } } });
        const byId = new Map(rows.map((row) => [row.id, row]));
        return ids.map((id) => byId.get(id) ?? null);
      },
      { maxBatchSize: KEYS_PER_LOOKUP },
    );
    this.nodes = groupCommit(
      async (keys) => {
        const byExperiment = new Map<string, Set<string>>();
        for (const key of keys) {
          byExperiment.set(
            key.experimentId,
            (byExperiment.get(key.experimentId) ?? new Set()).add(key.publicKey),
          );
        }
        const found = new Map<string, NodeRecord>();
        await Promise.all(
          [...byExperiment].map(async ([experimentId, publicKeys]) => {
            // Raw SQL, one statement with its token: every signed request needs this row.
            const rows = await db.$queryRaw<NodeRow[]>`
              SELECT p."id", p."peerId", p."userId", p."role", p."publicKey", p."tokenId", p."retiredAt",
                     t."revokedAt" AS "tokenRevokedAt", t."role" AS "tokenRole"
              FROM "Peer" p JOIN "PeerToken" t ON t."id" = p."tokenId"
              WHERE p."experimentId" = ${experimentId} AND p."publicKey" IN (${Prisma.join([...publicKeys])})`;
            for (const row of rows) {
              found.set(`${experimentId}\0${row.publicKey}`, {
                id: row.id,
                peerId: row.peerId,
                userId: row.userId,
                role: row.role,
                tokenId: row.tokenId,
                token: {
                  revokedAt: row.tokenRevokedAt === null ? null : new Date(row.tokenRevokedAt),
                  role: row.tokenRole,
                },
                retiredAt: row.retiredAt === null ? null : new Date(row.retiredAt),
              });
            }
          }),
        );
        return keys.map((key) => found.get(`${key.experimentId}\0${key.publicKey}`) ?? null);
      },
      { maxBatchSize: KEYS_PER_LOOKUP },
    );
  }
}
