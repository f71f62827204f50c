import type { AppContext } from "../context.ts";
import { requireOrganizer } from "./experiment-access.ts";
import type { SessionUser } from "../records.ts";

/**
 * The organizer's list of the loss-curve points they discarded, for the manage page to show and
 * restore: by timeline and step, with when each was recorded and discarded.
 */

/** The most points listed; a longer discarded range is restored as a range, through the form. */
const MAX_LISTED = 200;

export interface DiscardedMetricPoint {
  readonly timeline: number;
  readonly step: number;
  readonly loss: number;
  readonly recordedAt: string;
  readonly discardedAt: string;
}

export interface DiscardedMetricPointList {
  readonly points: readonly DiscardedMetricPoint[];
  /** How many points are discarded, listed or not. */
  readonly total: number;
}

export async function listDiscardedMetricPoints(
  ctx: AppContext,
  user: SessionUser,
  id: string,
): Promise<DiscardedMetricPointList> {
  const experiment = await requireOrganizer(ctx, id, user);
  const where = { experimentId: experiment.id, discardedAt: { not: null } };
  const [rows, total] = await Promise.all([
    ctx.db.metric.findMany({
      where,
      orderBy: [{ timeline: "asc" }, { step: "asc" }],
      take: MAX_LISTED,
      select: { timeline: true, step: true, loss: true, recordedAt: true, discardedAt: true },
    }),
    ctx.db.metric.count({ where }),
  ]);
  return {
    points: rows.flatMap((row) =>
      row.discardedAt === null
        ? []
        : [
            {
              timeline: row.timeline,
              step: row.step,
              loss: row.loss,
              recordedAt: row.recordedAt.toISOString(),
              discardedAt: row.discardedAt.toISOString(),
            },
          ],
    ),
    total,
  };
}
