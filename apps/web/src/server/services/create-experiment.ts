import { newRunConfig } from "@barnraise/protocol";
import { AppError, AppErrorCode } from "../app-error.ts";
import { isUniqueViolation } from "@barnraise/prisma";
import { newAuthorityKey } from "../authority-keys.ts";
import type { AppContext } from "../context.ts";
import { checkModelFitsDataset } from "./check-model-fit.ts";
import { toExperimentView, type ExperimentView } from "./read-experiment.ts";
import type { SessionUser } from "../records.ts";
import { ExperimentStatus } from "../../api/schemas/experiments.ts";
import type { CreateExperimentInput } from "../../api/schemas/experiments.ts";
import { canonicalConfigText } from "../stored-config.ts";

/**
 * An organizer publishes a training run. The config is validated with the protocol's schema (the
 * same one every peer verifies), so errors carry field paths like `config.training.targetBatchSize`,
 * and it is stored as the canonical JSON of the complete config, defaults applied.
 */

export async function createExperiment(
  ctx: AppContext,
  organizer: SessionUser,
  input: CreateExperimentInput,
): Promise<ExperimentView> {
  const config = input.config ?? newRunConfig();
  await checkModelFitsDataset(ctx, config);
  const key = newAuthorityKey(ctx.env.sealingSecrets, { experimentId: input.id, keyVersion: 1 });
  try {
    const experiment = await ctx.db.experiment.create({
      data: {
        id: input.id,
        name: input.name,
        description: input.description ?? "",
        organizerId: organizer.id,
        config: canonicalConfigText(config),
        configVersion: 1,
        status: ExperimentStatus.running,
        authorityPublicKey: key.publicKey,
        authoritySecretKey: key.sealedSecretKey,
        authorityKeyVersion: 1,
      },
    });
    ctx.logger.info({ experimentId: experiment.id, organizer: organizer.username }, "experiment created");
    return toExperimentView(experiment, organizer.username, ctx.now());
  } catch (error) {
    if (!isUniqueViolation(error)) throw error;
    throw new AppError(AppErrorCode.CONFLICT, `an experiment with id ${input.id} already exists`, {
      issues: [{ path: "id", message: "is taken" }],
    });
  }
}
