import {
  DEFAULT_MAX_SKEW_MS,
  MAX_REVOKED_ENTRIES,
  signRunControl,
  type RollbackTarget,
} from "@barnraise/protocol";
import type { RunControlResponse } from "../../api/schemas/peer.ts";
import { openAuthorityKeyPair } from "../authority-keys.ts";
import type { AppContext } from "../context.ts";
import { parseExperimentStatus } from "./experiment-access.ts";
import { readAuthorityRotations } from "./read-authority-rotations.ts";
import type { ExperimentRecord, PeerCaller } from "../records.ts";
import { AllowlistStatus } from "../../api/schemas/allowlist.ts";

/**
 * A node (trainer or aux) reads the run control: the organizer's standing orders, signed now by the
 * experiment's authority key, which the node verifies and passes on to the swarm.
 *
 * - `version` is Experiment.controlVersion, bumped by every change below.
 * - `status` and `generation`, and the rollback checkpoint once the run was rolled back.
 * - `revokedUsernames`: the users with a node in this experiment who are not the organizer and not
 *   approved (banned, removed from the allowlist, or pending), those seen most recently first.
 * - `revokedGrants`: this experiment's revoked peer tokens whose passes may still be valid (the
 *   latest pass issued on them has not expired), most recent revocation first. Every pass issued on
 *   them is refused; the nodes that held them may join again with another token. A token whose
 *   passes have all expired drops out, so the list stays bounded as the run ages.
 *
 * Each list holds at most MAX_REVOKED_ENTRIES (2000). Beside the control come the latest rotation
 * certificates of the authority key: a node that has not followed a rotation yet (it asks with a pass
 * of the previous key, taken during the grace period) follows them first, so the control, signed by
 * the new key, verifies.
 */
export async function readRunControl(ctx: AppContext, caller: PeerCaller): Promise<RunControlResponse> {
  const experiment = caller.experiment;
  const [rollback, revokedUsernames, revokedGrants, authorityRotations] = await Promise.all([
    rollbackTargetOf(ctx, experiment),
    revokedUsernamesOf(ctx, experiment),
    revokedGrantsOf(ctx, experiment.id),
    readAuthorityRotations(ctx.db, experiment),
  ]);
  const control = signRunControl(ctx.crypto, openAuthorityKeyPair(experiment, ctx.env.sealingSecrets), {
    experimentId: experiment.id,
    version: experiment.controlVersion,
    issuedAt: ctx.now(),
    status: parseExperimentStatus(experiment.status),
    generation: experiment.generation,
    rollback,
    revokedUsernames,
    revokedGrants,
  });
  return { control, authorityRotations };
}

async function rollbackTargetOf(
  ctx: AppContext,
  experiment: ExperimentRecord,
): Promise<RollbackTarget | null> {
  if (experiment.rollbackCheckpointId === null) return null;
  const checkpoint = await ctx.db.checkpoint.findFirst({
    where: { id: experiment.rollbackCheckpointId, experimentId: experiment.id },
    select: { id: true, step: true, sha256: true, sizeBytes: true },
  });
  if (checkpoint === null) {
    throw new Error(`experiment ${experiment.id} rolled back to a checkpoint that is gone`);
  }
  return {
    checkpointId: checkpoint.id,
    step: checkpoint.step,
    sha256: checkpoint.sha256,
    sizeBytes: Number(checkpoint.sizeBytes),
  };
}

async function revokedUsernamesOf(
  ctx: AppContext,
  experiment: Pick<ExperimentRecord, "id" | "organizerId">,
): Promise<string[]> {
  const users = await ctx.db.peer.groupBy({
    by: ["userId"],
    where: {
      experimentId: experiment.id,
      userId: { not: experiment.organizerId },
      user: { allowlist: { none: { experimentId: experiment.id, status: AllowlistStatus.approved } } },
    },
    _max: { lastSeenAt: true },
    orderBy: { _max: { lastSeenAt: "desc" } },
    take: MAX_REVOKED_ENTRIES,
  });
  const rows = await ctx.db.user.findMany({
    where: { id: { in: users.map((user) => user.userId) } },
    select: { id: true, username: true },
  });
  const usernames = new Map(rows.map((row) => [row.id, row.username]));
  return users.flatMap((user) => usernames.get(user.userId) ?? []);
}

async function revokedGrantsOf(ctx: AppContext, experimentId: string): Promise<string[]> {
  const tokens = await ctx.db.peerToken.findMany({
    // Kept a clock-skew margin past the last expiry: a node whose clock lags still sees those passes live.
    where: {
      experimentId,
      revokedAt: { not: null },
      passesExpireAt: { gt: new Date(ctx.now() - DEFAULT_MAX_SKEW_MS) },
    },
    orderBy: [{ revokedAt: "desc" }, { id: "asc" }],
    take: MAX_REVOKED_ENTRIES,
    select: { id: true },
  });
  return tokens.map((token) => token.id);
}
