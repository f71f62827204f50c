import type { Database } from "@barnraise/prisma";
import { groupCommit } from "@barnraise/prisma";
import type DataLoader from "dataloader";
import type { ExperimentRecord } from "./services/experiment-access.ts";

/** A node's Peer row with its token, as the signed-request routes check it. */
export interface NodeRecord {
  readonly id: string;
  readonly peerId: string;
  readonly userId: string;
  readonly role: string;
  readonly token: { readonly revokedAt: Date | null; readonly role: string };
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
            const rows = await db.peer.findMany({
              where: { experimentId, publicKey: { in: [...publicKeys] } },
              select: {
                id: true,
                peerId: true,
                userId: true,
                role: true,
                publicKey: true,
                token: { select: { revokedAt: true, role: true } },
              },
            });
            for (const { publicKey, ...row } of rows) found.set(`${experimentId}\0${publicKey}`, row);
          }),
        );
        return keys.map((key) => found.get(`${key.experimentId}\0${key.publicKey}`) ?? null);
      },
      { maxBatchSize: KEYS_PER_LOOKUP },
    );
  }
}
