import { DEFAULT_ROTATION_GRACE_MS, MAX_ROTATION_CERTIFICATES } from "@barnraise/protocol";
import type { Database } from "@barnraise/prisma";
import type { ExperimentRecord } from "../records.ts";

/**
 * The rotation certificates of an experiment's authority key (written by rotate-authority-key.ts)
 * that join and run control answers carry: the latest MAX_ROTATION_CERTIFICATES, oldest first, up to
 * the key version of the experiment row the answer is signed with, so a node never hears of a key
 * newer than the one that signed what it got in the same answer. A node follows them from the key it
 * trusts to the current one (protocol/authority-rotation.ts).
 */
export async function readAuthorityRotations(
  db: Pick<Database, "authorityRotation">,
  experiment: Pick<ExperimentRecord, "id" | "authorityKeyVersion">,
): Promise<string[]> {
  // Never rotated: nothing to read (most experiments).
  if (experiment.authorityKeyVersion <= 1) return [];
  const rows = await db.authorityRotation.findMany({
    where: { experimentId: experiment.id, keyVersion: { lte: experiment.authorityKeyVersion } },
    orderBy: { keyVersion: "desc" },
    take: MAX_ROTATION_CERTIFICATES,
    select: { certificate: true },
  });
  return rows.map((row) => row.certificate).reverse();
}

/** A rotation whose grace period may not be over: passes and requests of its previous key still count. */
export interface RecentRotation {
  readonly publicKey: string;
  readonly previousPublicKey: string;
  readonly rotatedAt: number;
  readonly graceMs: number;
}

/**
 * The rotations up to the experiment's key version whose grace period (DEFAULT_ROTATION_GRACE_MS)
 * has not ended at `now`, oldest first, when they lead to the experiment's current key: passes of
 * each one's previous key issued before it, and requests addressed to that key, are taken until its
 * grace ends. Empty when there are none (or when the current key came from a rotation no certificate
 * was written for).
 */
export async function readRecentRotations(
  db: Pick<Database, "authorityRotation">,
  experiment: Pick<ExperimentRecord, "id" | "authorityKeyVersion" | "authorityPublicKey">,
  now: number,
): Promise<RecentRotation[]> {
  if (experiment.authorityKeyVersion <= 1) return [];
  const rows = await db.authorityRotation.findMany({
    where: {
      experimentId: experiment.id,
      keyVersion: { lte: experiment.authorityKeyVersion },
      rotatedAt: { gt: new Date(now - DEFAULT_ROTATION_GRACE_MS) },
    },
    orderBy: { keyVersion: "asc" },
    take: MAX_ROTATION_CERTIFICATES,
    select: { keyVersion: true, publicKey: true, previousPublicKey: true, rotatedAt: true },
  });
  const last = rows.at(-1);
  if (
    last?.keyVersion !== experiment.authorityKeyVersion ||
    last.publicKey !== experiment.authorityPublicKey
  ) {
    return [];
  }
  return rows.map((row) => ({
    publicKey: row.publicKey,
    previousPublicKey: row.previousPublicKey,
    rotatedAt: row.rotatedAt.getTime(),
    graceMs: DEFAULT_ROTATION_GRACE_MS,
  }));
}
