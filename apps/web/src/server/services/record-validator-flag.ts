import { PeerRole } from "@barnraise/protocol";
import type { ValidatorFlagRequest } from "../../api/schemas/peer.ts";
import type { ValidatorFlagView } from "../../api/schemas/validator-flags.ts";
import { enqueueAlert } from "../alerts/enqueue-alert.ts";
import { AppError, AppErrorCode } from "../app-error.ts";
import type { AppContext } from "../context.ts";
import { ownerStatuses, toValidatorFlagView, validatorFlagInclude } from "./list-validator-flags.ts";
import type { AuxCaller } from "../records.ts";
import { AlertEventType } from "../../api/schemas/alerts.ts";

/**
 * The organizer's aux peer flags a trainer whose contributions raise the held-out loss (`POST
 * …/validator-flags`, signed; see the aux's `ContributionValidator`). The platform keeps one row per
 * node with the latest evidence, counts the reports, and keeps the earliest epoch of the current
 * run generation at which the node was seen hurting (the manage page offers to roll back to a
 * checkpoint before it). The first report about a node in a run generation alerts the organizer
 * (`node.flagged`, docs/alerts.md).
 *
 * Refused: a PeerId no trainer of this experiment joined with (NOT_FOUND: nothing to ban), and a
 * report from a run generation the platform has not reached (INVALID_INPUT). Only an aux of the
 * experiment's organizer gets here (`readSignedJson`): a trainer's pass, another experiment's pass,
 * a forged or replayed request are refused before.
 */
export async function recordValidatorFlag(
  ctx: AppContext,
  caller: AuxCaller,
  flag: ValidatorFlagRequest,
): Promise<ValidatorFlagView> {
  const { experiment } = caller;
  if (flag.generation > experiment.generation) {
    throw new AppError(
      AppErrorCode.INVALID_INPUT,
      `the run is at generation ${experiment.generation}, not ${flag.generation}`,
      { issues: [{ path: "generation", message: `must be at most ${experiment.generation}` }] },
    );
  }
  const peer = await ctx.db.peer.findFirst({
    where: { experimentId: experiment.id, peerId: flag.peerId, role: PeerRole.trainer },
    select: { id: true, userId: true },
  });
  if (peer === null) {
    throw new AppError(
      AppErrorCode.NOT_FOUND,
      `no trainer of experiment ${experiment.id} has PeerId ${flag.peerId}`,
    );
  }
  const now = new Date(ctx.now());
  const evidence = {
    epoch: flag.epoch,
    generation: flag.generation,
    baselineLoss: flag.baselineLoss,
    lossAfter: flag.lossAfter,
    medianDelta: flag.medianDelta,
    normRatio: flag.normRatio,
    hurtSamples: flag.hurtSamples,
    recentSamples: flag.recentSamples,
    reportedBy: caller.peer.peerId,
    reportedAt: now,
  };
  const key = { experimentId_peerRowId: { experimentId: experiment.id, peerRowId: peer.id } };
  // Two reports about one node at once are rare (the aux sends one per 30 s at most); the later
  // write wins, and the earliest epoch may then miss the other's.
  const previous = await ctx.db.validatorFlag.findUnique({
    where: key,
    select: { generation: true, firstHurtEpoch: true },
  });
  const firstHurtEpoch =
    previous?.generation === flag.generation
      ? Math.min(previous.firstHurtEpoch, flag.firstHurtEpoch)
      : flag.firstHurtEpoch;
  const row = await ctx.db.$transaction(async (tx) => {
    const flagged = await tx.validatorFlag.upsert({
      where: key,
      create: { experimentId: experiment.id, peerRowId: peer.id, firstHurtEpoch, ...evidence },
      update: { firstHurtEpoch, reports: { increment: 1 }, ...evidence },
      include: validatorFlagInclude,
    });
    // Announced once per node and run generation: the aux repeats its report while the node hurts.
    if (previous?.generation !== flag.generation) {
      const owner = flagged.peer.user.username;
      await enqueueAlert(ctx, tx, experiment, {
        type: AlertEventType.nodeFlagged,
        summary: `the validator flagged ${owner}'s node ${flag.peerId}: its contributions raised the held-out loss`,
        details: {
          node: flag.peerId,
          owner,
          epoch: flag.epoch,
          baselineLoss: flag.baselineLoss,
          lossAfter: flag.lossAfter,
          hurtSamples: flag.hurtSamples,
          recentSamples: flag.recentSamples,
        },
      });
    }
    return flagged;
  });
  const statuses = await ownerStatuses(ctx, experiment, [peer.userId]);
  const view = toValidatorFlagView(row, statuses.get(peer.userId) ?? "none");
  ctx.logger.warn(
    {
      experimentId: experiment.id,
      peerId: flag.peerId,
      username: view.username,
      epoch: flag.epoch,
      baselineLoss: flag.baselineLoss,
      lossAfter: flag.lossAfter,
      hurtSamples: flag.hurtSamples,
      recentSamples: flag.recentSamples,
      reports: view.reports,
    },
    "the validator flagged a node",
  );
  return view;
}
