import type { CheckpointView } from "../../src/api/schemas/public.ts";
import type { ValidatorFlagView } from "../../src/api/schemas/validator-flags.ts";
import { formatCount, formatDecimal } from "./format.ts";

/** What the manage page says about a flagged node, and which checkpoint it offers to roll back to. */

/** What the validator saw, in one sentence. */
export function flagEvidence(flag: ValidatorFlagView): string {
  const after = flag.lossAfter === null ? "a loss that is not finite" : formatDecimal(flag.lossAfter);
  const median =
    flag.medianDelta > 0 ? `+${formatDecimal(flag.medianDelta)}` : formatDecimal(flag.medianDelta);
  return (
    `Epoch ${formatCount(flag.epoch)}: a step along its contribution took the held-out loss from ` +
    `${formatDecimal(flag.baselineLoss)} to ${after} (the median trainer’s step changed it by ${median}); ` +
    `its contribution is ${formatDecimal(flag.normRatio)}× the median’s size. ` +
    `Hurting since epoch ${formatCount(flag.firstHurtEpoch)}.`
  );
}

/**
 * The checkpoint to roll back to for `flag`: the newest of the flag's run generation saved at or
 * before the epoch from which the node's contributions hurt (a checkpoint of step s holds the state
 * before epoch s's round), when the run is still in that generation; undefined when there is none.
 * `checkpoints` come newest step first, as the checkpoint list gives them.
 */
export function rollbackTarget(
  flag: Pick<ValidatorFlagView, "generation" | "firstHurtEpoch">,
  checkpoints: readonly CheckpointView[],
  generation: number,
): CheckpointView | undefined {
  if (flag.generation !== generation) return undefined;
  return checkpoints.find(
    (checkpoint) => checkpoint.generation === flag.generation && checkpoint.step <= flag.firstHurtEpoch,
  );
}

/** "12D3KooW…x7Qp": a PeerId short enough for a row (the page puts the whole one in its title). */
export function shortPeerId(peerId: string): string {
  return peerId.length <= 16 ? peerId : `${peerId.slice(0, 8)}…${peerId.slice(-4)}`;
}
