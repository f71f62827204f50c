import type { AppContext } from "../context.ts";

/**
 * The run's metric timelines. Metric rows are keyed (experiment, timeline, step) and never updated;
 * a new timeline starts when the run is rolled back (by the organizer) or resumes from a state
 * behind its last recorded step (reported by an aux peer), and each start is a RunEvent.
 *
 * A row (t, s) is discarded when an event starting a later timeline t' > t restarted from a step
 * before s: the run went back behind it, so the curve no longer builds on it.
 */

/**
 * The highest step recorded in `timeline` that the organizer has not discarded, or null when it has
 * none: a discarded forged step far ahead must not make a resume look like one behind the run.
 */
export async function lastStepOf(
  ctx: AppContext,
  experimentId: string,
  timeline: number,
): Promise<number | null> {
  // Raw SQL: the metrics route asks after every report, and this skips Prisma's query compilation.
  const [row] = await ctx.db.$queryRaw<{ step: number | bigint | null }[]>`
    SELECT MAX("step") AS "step" FROM "Metric"
    WHERE "experimentId" = ${experimentId} AND "timeline" = ${timeline} AND "discardedAt" IS NULL`;
  return row?.step === null || row?.step === undefined ? null : Number(row.step);
}

/** Whether the row (timeline, step) is discarded by `events`. */
export function discardedBy(
  events: readonly { readonly timeline: number; readonly step: number }[],
): (timeline: number, step: number) => boolean {
  // For each timeline, the earliest step any later timeline restarted from.
  const restarts = [...events].sort((a, b) => b.timeline - a.timeline);
  const cache = new Map<number, number>();
  const earliestRestartAfter = (timeline: number): number => {
    const cached = cache.get(timeline);
    if (cached !== undefined) return cached;
    let earliest = Number.POSITIVE_INFINITY;
    for (const event of restarts) {
      if (event.timeline <= timeline) break;
      earliest = Math.min(earliest, event.step);
    }
    cache.set(timeline, earliest);
    return earliest;
  };
  return (timeline, step) => step > earliestRestartAfter(timeline);
}
