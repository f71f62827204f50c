import type { ValidatorFlagView } from "../../api/schemas/validator-flags.ts";
import type { AppContext } from "../context.ts";
import { parseAllowlistStatus, requireOrganizer } from "./experiment-access.ts";
import type { SessionUser } from "../records.ts";

/**
 * The organizer's list of trainer nodes the aux's validator flagged (`GET …/validator-flags`), the
 * most recently reported first, each with the evidence of its latest report and where its owner
 * stands now (so the manage page offers a ban only to whom it applies).
 */

/** The most flags listed: a run under attack by more nodes than this has bigger problems to show. */
const MAX_LISTED = 200;

interface FlagRow {
  epoch: number;
  generation: number;
  firstHurtEpoch: number;
  baselineLoss: number;
  lossAfter: number | null;
  medianDelta: number;
  normRatio: number;
  hurtSamples: number;
  recentSamples: number;
  reports: number;
  createdAt: Date;
  reportedAt: Date;
  peer: {
    peerId: string;
    userId: string;
    user: { username: string };
    token: { revokedAt: Date | null };
  };
}

/** Selects what `toValidatorFlagView` reads, for a Prisma query. */
export const validatorFlagInclude = {
  peer: {
    select: {
      peerId: true,
      userId: true,
      user: { select: { username: true } },
      token: { select: { revokedAt: true } },
    },
  },
} as const;

export function toValidatorFlagView(
  row: FlagRow,
  ownerStatus: ValidatorFlagView["ownerStatus"],
): ValidatorFlagView {
  return {
    peerId: row.peer.peerId,
    username: row.peer.user.username,
    ownerStatus,
    tokenRevoked: row.peer.token.revokedAt !== null,
    epoch: row.epoch,
    generation: row.generation,
    firstHurtEpoch: row.firstHurtEpoch,
    baselineLoss: row.baselineLoss,
    lossAfter: row.lossAfter,
    medianDelta: row.medianDelta,
    normRatio: row.normRatio,
    hurtSamples: row.hurtSamples,
    recentSamples: row.recentSamples,
    reports: row.reports,
    firstFlaggedAt: row.createdAt.toISOString(),
    reportedAt: row.reportedAt.toISOString(),
  };
}

/** Where each of `userIds` stands in the experiment: organizer, an allowlist status, or none. */
export async function ownerStatuses(
  ctx: AppContext,
  experiment: { id: string; organizerId: string },
  userIds: readonly string[],
): Promise<Map<string, ValidatorFlagView["ownerStatus"]>> {
  const entries = await ctx.db.allowlistEntry.findMany({
    where: { experimentId: experiment.id, userId: { in: [...new Set(userIds)] } },
    select: { userId: true, status: true },
  });
  const statuses = new Map<string, ValidatorFlagView["ownerStatus"]>(
    entries.map((entry) => [entry.userId, parseAllowlistStatus(entry.status)]),
  );
  statuses.set(experiment.organizerId, "organizer");
  return statuses;
}

export async function listValidatorFlags(
  ctx: AppContext,
  user: SessionUser,
  id: string,
): Promise<ValidatorFlagView[]> {
  const experiment = await requireOrganizer(ctx, id, user);
  const rows = await ctx.db.validatorFlag.findMany({
    where: { experimentId: id },
    include: validatorFlagInclude,
    orderBy: [{ reportedAt: "desc" }, { id: "asc" }],
    take: MAX_LISTED,
  });
  const statuses = await ownerStatuses(
    ctx,
    experiment,
    rows.map((row) => row.peer.userId),
  );
  return rows.map((row) => toValidatorFlagView(row, statuses.get(row.peer.userId) ?? "none"));
}
