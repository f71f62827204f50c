import {
  canonicalJson,
  experimentConfigSchema,
  experimentIdSchema,
  newRunConfig,
  type ExperimentConfig,
} from "@barnraise/protocol";
import { z } from "zod";
import { AppError, AppErrorCode } from "../app-error.ts";
import { isUniqueViolation } from "@barnraise/prisma";
import { newAuthorityKey } from "../authority-keys.ts";
import type { AppContext } from "../context.ts";
import { checkModelFitsDataset } from "./check-model-fit.ts";
import { ExperimentStatus } from "./experiment-access.ts";
import { toExperimentView, type ExperimentView } from "./read-experiment.ts";
import type { SessionUser } from "../records.ts";

/**
 * An organizer publishes a training run. The config is validated with the protocol's schema (the
 * same one every peer verifies), so errors carry field paths like `config.training.targetBatchSize`,
 * and it is stored as the canonical JSON of the complete config, defaults applied.
 */

/** Experiment ids that the web pages use as path segments under /experiments/. */
const RESERVED_IDS = new Set(["new"]);

export const experimentNameSchema = z.string().trim().min(1, "must not be empty").max(100);
export const experimentDescriptionSchema = z.string().max(5000);

export const createExperimentInputSchema = z.strictObject({
  id: experimentIdSchema.refine((id) => !RESERVED_IDS.has(id), { message: "is reserved; choose another id" }),
  name: experimentNameSchema,
  description: experimentDescriptionSchema.optional(),
  /** Any subset of the config; omitted fields take their defaults. */
  config: experimentConfigSchema.optional(),
});
export type CreateExperimentInput = z.infer<typeof createExperimentInputSchema>;

/** The stored form of a config: its canonical JSON (RFC 8785), so equal configs have equal text. */
export function canonicalConfigText(config: ExperimentConfig): string {
  return new TextDecoder().decode(canonicalJson(config));
}

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
