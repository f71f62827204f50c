import { PeerRole } from "@barnraise/protocol";
import { AppError, AppErrorCode } from "../app-error.ts";
import type { AppContext } from "../context.ts";
import type { ExperimentRecord } from "../records.ts";

/**
 * Whether a node's owner may still take part in an experiment, as far as the platform knows now:
 * what a pass alone cannot say. Joining checks it before issuing a pass; nodes' signed requests check
 * it again, so a ban or a revoked token takes effect at once.
 *
 * Refusals, in the order they are checked: TOKEN_REVOKED, BANNED, NOT_ALLOWLISTED (a trainer whose
 * owner neither organizes the experiment nor is approved), FORBIDDEN (an aux node whose owner does
 * not organize it).
 */

export interface NodeStanding {
  /** The owner of the node's token. */
  readonly userId: string;
  readonly role: PeerRole;
  /** When the node's token was revoked, or null. */
  readonly revokedAt: Date | null;
}

export async function requireStanding(
  ctx: AppContext,
  experiment: Pick<ExperimentRecord, "id" | "organizerId">,
  node: NodeStanding,
): Promise<void> {
  if (node.revokedAt !== null) throw new AppError(AppErrorCode.TOKEN_REVOKED, "the token was revoked");
  if (node.userId === experiment.organizerId) return;
  const entry = await ctx.db.allowlistEntry.findUnique({
    where: { experimentId_userId: { experimentId: experiment.id, userId: node.userId } },
    select: { status: true },
  });
  if (entry?.status === "banned") {
    throw new AppError(AppErrorCode.BANNED, "the token's owner is banned from this experiment");
  }
  if (node.role === PeerRole.trainer && entry?.status !== "approved") {
    throw new AppError(
      AppErrorCode.NOT_ALLOWLISTED,
      "the token's owner is not on this experiment's allowlist",
    );
  }
  if (node.role === PeerRole.aux) {
    throw new AppError(AppErrorCode.FORBIDDEN, "aux tokens work only for the experiment's organizer");
  }
}

export function parsePeerRole(value: string): PeerRole {
  if (value === PeerRole.trainer || value === PeerRole.aux) return value;
  throw new Error(`unknown peer role in the database: ${value}`);
}
