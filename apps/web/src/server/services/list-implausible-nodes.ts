import type { ValidatorFlagView } from "../../api/schemas/validator-flags.ts";
import type { AppContext } from "../context.ts";
import { requireOrganizer } from "./experiment-access.ts";
import { ownerStatuses } from "./list-validator-flags.ts";
import type { SessionUser } from "../records.ts";

/** A trainer node whose progress records an aux refused as implausible, for the manage page. */
export interface ImplausibleNodeView {
  readonly peerId: string;
  readonly username: string;
  /** Where its owner stands: the ban is offered to volunteers only. */
  readonly ownerStatus: ValidatorFlagView["ownerStatus"];
  /** Why the latest refused record could not be true, as the aux said. */
  readonly reason: string;
  /** Its records refused so far (the largest count an aux reported). */
  readonly count: number;
  /** When the latest was refused, ISO 8601. */
  readonly at: string;
}

/** The most nodes listed. */
const MAX_LISTED = 200;

/**
 * A node is flagged once an aux refused this many of its claims. A few refusals can come from an
 * honest node: a credit check can cut a round that a restart mid-round left half seen (a 30-minute
 * soak with 51 restarts cut one honest node in 3 rounds, two of them at one resume, and another in
 * 1), while a node that lies does so with every record it sends (the hostile-claims story's liar
 * was refused about once a second).
 */
export const FLAG_AFTER_REFUSALS = 5;

/**
 * The organizer's list of trainer nodes whose progress records the swarm refused as implausible (a
 * step far ahead, samples or throughput no trainer could have) at least FLAG_AFTER_REFUSALS times,
 * the most recent first, with the aux's reason as evidence.
 */
export async function listImplausibleNodes(
  ctx: AppContext,
  user: SessionUser,
  id: string,
): Promise<ImplausibleNodeView[]> {
  const experiment = await requireOrganizer(ctx, id, user);
  const rows = await ctx.db.peer.findMany({
    where: { experimentId: id, implausibleAt: { not: null }, implausibleCount: { gte: FLAG_AFTER_REFUSALS } },
    select: {
      peerId: true,
      userId: true,
      implausibleAt: true,
      implausibleReason: true,
      implausibleCount: true,
      user: { select: { username: true } },
    },
    orderBy: [{ implausibleAt: "desc" }, { id: "asc" }],
    take: MAX_LISTED,
  });
  const statuses = await ownerStatuses(
    ctx,
    experiment,
    rows.map((row) => row.userId),
  );
  return rows.map((row) => ({
    peerId: row.peerId,
    username: row.user.username,
    ownerStatus: statuses.get(row.userId) ?? "none",
    reason: row.implausibleReason ?? "",
    count: row.implausibleCount,
    at: (row.implausibleAt ?? new Date(0)).toISOString(),
  }));
}
