import { latestCheckpointStep } from "@barnraise/swarm";
import { evaluateModel, type Evaluation, type TrainableModel } from "@barnraise/models";
import { waitForFinalCheckpoint } from "../training/final-checkpoint.ts";
import type { TrainResult } from "../training/trainer.ts";
import type { PeerData } from "./data-phase.ts";
import type { VolunteerOptions } from "./volunteer-options.ts";
import type { SwarmMember } from "./swarm-phase.ts";

/**
 * A run that reached its last step ends with the model's score on the held-out split, and stays in
 * the swarm until the aux has the last step's checkpoint (it downloads the state from this peer).
 * A run that stopped early ends as it is.
 */
export async function finish(
  options: VolunteerOptions,
  trained: TrainResult,
  model: TrainableModel,
  data: PeerData,
  member: SwarmMember,
): Promise<Evaluation | undefined> {
  if (trained.reason !== "max-steps") return undefined;
  const { reporter, abortSignal } = options;
  const { swarm, platform } = member.session;
  const evaluation = await evaluateModel(model, member.optimizer.parameters, data.testBatches(), abortSignal);
  reporter.log("info", "evaluated on the test split", { step: trained.step, ...evaluation });
  await waitForFinalCheckpoint({
    step: trained.step,
    latestStep: (signal) => latestCheckpointStep(platform, signal),
    auxPresent: () => swarm.node.members().some((peer) => swarm.node.modeOf(peer) === "aux"),
    log: (level, message, fields) => {
      reporter.log(level, message, fields);
    },
    signal: AbortSignal.any([options.stopSignal, member.session.leaving, abortSignal]),
  });
  return evaluation;
}
