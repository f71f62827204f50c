import { AppError, AppErrorCode } from "../app-error.ts";
import type { AppContext } from "../context.ts";
import { requireOrganizer } from "./experiment-access.ts";
import type { SessionUser } from "../records.ts";
import type { DiscardMetricPointsInput } from "../../api/schemas/experiments.ts";

/**
 * The organizer discards the loss-curve points of a range of steps (a hostile volunteer or a broken
 * aux got wrong values onto the curve), or restores them. A discarded point stays stored, with when
 * and by whom, but no view shows it, and the ingest no longer measures how far a report may jump
 * ahead from it. Its step stays taken: a report of that step again is not stored, so a forger cannot
 * put the point back by sending it again. Points already in the asked state are left as they are (a
 * discarded point keeps its first discard's time).
 */

export interface DiscardedMetricPoints {
  readonly discarded: boolean;
  readonly timeline: number;
  readonly fromStep: number;
  readonly toStep: number;
  /** How many points changed state; points already discarded (or restored) are not counted. */
  readonly changed: number;
}

export async function discardMetricPoints(
  ctx: AppContext,
  user: SessionUser,
  id: string,
  input: DiscardMetricPointsInput,
): Promise<DiscardedMetricPoints> {
  const experiment = await requireOrganizer(ctx, id, user);
  const timeline = input.timeline ?? experiment.timeline;
  if (timeline > experiment.timeline) {
    throw new AppError(
      AppErrorCode.INVALID_INPUT,
      `timeline: the run has no timeline ${timeline}; its current one is ${experiment.timeline}`,
      { issues: [{ path: "timeline", message: `must be at most ${experiment.timeline}` }] },
    );
  }
  const range = {
    experimentId: experiment.id,
    timeline,
    step: { gte: input.fromStep, lte: input.toStep },
  };
  const { count } = input.discarded
    ? await ctx.db.metric.updateMany({
        where: { ...range, discardedAt: null },
        data: { discardedAt: new Date(ctx.now()), discardedBy: user.id },
      })
    : await ctx.db.metric.updateMany({
        where: { ...range, discardedAt: { not: null } },
        data: { discardedAt: null, discardedBy: null },
      });
  ctx.logger.info(
    { experimentId: experiment.id, timeline, fromStep: input.fromStep, toStep: input.toStep, changed: count },
    input.discarded ? "metric points discarded" : "metric points restored",
  );
  return {
    discarded: input.discarded,
    timeline,
    fromStep: input.fromStep,
    toStep: input.toStep,
    changed: count,
  };
}
