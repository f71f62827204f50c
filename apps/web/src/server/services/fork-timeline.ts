import { RunEventKind } from "../../api/schemas/public.ts";
import type { ForkTimelineRequest, TimelineResponse } from "../../api/schemas/peer.ts";
import type { AppContext } from "../context.ts";
import { lastStepOf } from "./run-timelines.ts";
import type { AuxCaller } from "../records.ts";

/**
 * An aux peer reports that the swarm restarted from the state of step `fromStep` (the last live peer
 * left, and the run resumed from a checkpoint). If that is behind the last step recorded in the
 * current timeline, the steps after it will be trained again, so a new timeline starts, with a
 * "resumed" RunEvent; the old timeline's later steps are then shown as discarded. Otherwise nothing
 * changes. Two aux peers reporting the same restart at once start one timeline: the switch is
 * conditioned on the timeline both of them saw.
 */
export async function forkTimeline(
  ctx: AppContext,
  caller: AuxCaller,
  input: ForkTimelineRequest,
): Promise<TimelineResponse> {
  const experiment = caller.experiment;
  const lastStep = await lastStepOf(ctx, experiment.id, experiment.timeline);
  if (lastStep === null || input.fromStep >= lastStep) {
    return { timeline: experiment.timeline, forked: false, lastStep };
  }
  const timeline = experiment.timeline + 1;
  const forked = await ctx.db.$transaction(async (tx) => {
    const { count } = await tx.experiment.updateMany({
      where: { id: experiment.id, timeline: experiment.timeline },
      data: { timeline },
    });
    if (count === 0) return false;
    await tx.runEvent.create({
      data: {
        experimentId: experiment.id,
        kind: RunEventKind.resumed,
        step: input.fromStep,
        fromStep: lastStep,
        timeline,
        createdAt: new Date(ctx.now()),
      },
    });
    return true;
  });
  if (!forked) {
    // Another report moved the run to a new timeline first.
    const current = await ctx.db.experiment.findUniqueOrThrow({
      where: { id: experiment.id },
      select: { timeline: true },
    });
    return {
      timeline: current.timeline,
      forked: false,
      lastStep: await lastStepOf(ctx, experiment.id, current.timeline),
    };
  }
  ctx.logger.info(
    { experimentId: experiment.id, fromStep: input.fromStep, lastStep, timeline },
    "run resumed behind its last step: new timeline",
  );
  return { timeline, forked: true, lastStep: await lastStepOf(ctx, experiment.id, timeline) };
}
