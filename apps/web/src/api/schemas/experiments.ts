import { BuiltInModel, experimentConfigSchema, UPLOADED_MODEL } from "@barnraise/protocol";
import { z } from "zod";
import { swarmStatusSchema } from "./public.ts";
import { experimentIdSchema } from "@barnraise/protocol";

/**
 * Experiments. Request bodies are the services' own schemas; the config field is the protocol's
 * experiment config schema, documented once as ExperimentConfig (input: every field optional;
 * output: the complete config with defaults applied).
 */

export const ExperimentStatus = { running: "running", paused: "paused" } as const;
export type ExperimentStatus = (typeof ExperimentStatus)[keyof typeof ExperimentStatus];

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

/** Metric.step is a 32-bit INTEGER on PostgreSQL: a larger bound would fail there, not match more. */
const MAX_STEP = 2_147_483_647;

const step = z.int().min(0).max(MAX_STEP);

export const discardMetricPointsInputSchema = z
  .strictObject({
    fromStep: step.meta({ description: "The first step of the range" }),
    toStep: step.meta({ description: "The last step of the range, included; at least fromStep" }),
    discarded: z.boolean().meta({ description: "true discards the range's points, false restores them" }),
    timeline: z.int().min(0).max(MAX_STEP).optional().meta({
      description: "The metric timeline of the points; the run's current one when left out",
    }),
  })
  .refine((input) => input.fromStep <= input.toStep, {
    path: ["toStep"],
    message: "must be at least fromStep",
  });

export type DiscardMetricPointsInput = z.infer<typeof discardMetricPointsInputSchema>;

export const rollBackExperimentInputSchema = z.strictObject({
  checkpointId: z.string().min(1).max(64).meta({ description: "The checkpoint to roll back to" }),
});

export type RollBackExperimentInput = z.infer<typeof rollBackExperimentInputSchema>;

export const rotateAuthorityKeyInputSchema = z.strictObject({});

export const setExperimentStatusInputSchema = z.strictObject({
  status: z.enum([ExperimentStatus.running, ExperimentStatus.paused]),
});

export type SetExperimentStatusInput = z.infer<typeof setExperimentStatusInputSchema>;

/** How many machines one trainer token, and one volunteer across tokens, may run at once. */
export const nodeLimitsSchema = z.strictObject({
  maxNodesPerToken: z.int().min(1).max(1_000),
  maxNodesPerUser: z.int().min(1).max(10_000),
});

export const updateExperimentInputSchema = z.strictObject({
  name: experimentNameSchema.optional(),
  description: experimentDescriptionSchema.optional(),
  config: experimentConfigSchema.optional(),
  limits: nodeLimitsSchema.optional(),
});

export type UpdateExperimentInput = z.infer<typeof updateExperimentInputSchema>;

const experimentConfigDoc = experimentConfigSchema.in.meta({
  id: "ExperimentConfig",
  description: "The experiment config (packages/protocol): the model, training, optimizer and swarm settings",
});
const configInput = experimentConfigSchema.meta({
  id: "ExperimentConfigInput",
  description: "Any subset of the config; omitted fields take their defaults",
});

export const createExperimentRequestSchema = createExperimentInputSchema
  .extend({ config: configInput.optional() })
  .meta({ id: "CreateExperimentRequest" });

export const updateExperimentRequestSchema = updateExperimentInputSchema
  .extend({ config: configInput.optional() })
  .meta({
    id: "UpdateExperimentRequest",
    description: "The fields to change; a config replaces the whole config",
  });

export const setExperimentStatusRequestSchema = setExperimentStatusInputSchema.meta({
  id: "SetExperimentStatusRequest",
});

export const rollBackRequestSchema = rollBackExperimentInputSchema.meta({ id: "RollBackRequest" });

export const discardMetricPointsRequestSchema = discardMetricPointsInputSchema.meta({
  id: "DiscardMetricPointsRequest",
  description: "A range of steps of one timeline whose loss-curve points to discard or restore",
});

export const discardedMetricPointsSchema = z
  .strictObject({
    discarded: z.boolean().meta({ description: "Whether the range's points are now discarded" }),
    timeline: z.number().int().nonnegative(),
    fromStep: z.number().int().nonnegative(),
    toStep: z.number().int().nonnegative(),
    changed: z.number().int().nonnegative().meta({
      description: "How many points changed state; those already discarded (or restored) are not counted",
    }),
  })
  .meta({ id: "DiscardedMetricPoints" });

export const emptyRequestSchema = rotateAuthorityKeyInputSchema.meta({
  id: "EmptyRequest",
  description: "An empty JSON object: the action needs no parameters",
});

const status = z.enum(["running", "paused"]);
const timestamp = z.iso.datetime();

export const experimentSchema = z
  .strictObject({
    id: z.string(),
    name: z.string(),
    description: z.string(),
    status,
    organizer: z.string().meta({ description: "The organizer's username" }),
    config: experimentConfigDoc,
    configVersion: z.number().int().positive().meta({ description: "Bumped whenever the config changes" }),
    authorityPublicKey: z.string().meta({ description: "Ed25519 public key, unpadded base64url" }),
    authorityKeyVersion: z.number().int().positive(),
    swarm: swarmStatusSchema,
    limits: z
      .strictObject({
        maxNodesPerToken: z.number().int().positive(),
        maxNodesPerUser: z.number().int().positive(),
      })
      .meta({
        description:
          "How many machines (node keys with a live pass) one trainer token, and one volunteer across tokens, may run at once",
      }),
    createdAt: timestamp,
    updatedAt: timestamp,
  })
  .meta({ id: "Experiment" });

export const experimentSummarySchema = z
  .strictObject({
    id: z.string(),
    name: z.string(),
    description: z.string(),
    status,
    organizer: z.string(),
    modelKind: z.enum([BuiltInModel.mnistMlp, BuiltInModel.albertMlm, UPLOADED_MODEL]),
    peersOnline: z.number().int().nonnegative().meta({ description: "Peers seen in the last 2 minutes" }),
    createdAt: timestamp,
    updatedAt: timestamp,
  })
  .meta({ id: "ExperimentSummary" });

export const experimentListSchema = z
  .strictObject({ experiments: z.array(experimentSummarySchema) })
  .meta({ id: "ExperimentList" });

export const membershipSchema = z
  .strictObject({ status: z.enum(["organizer", "approved", "pending", "banned", "none"]) })
  .meta({ id: "Membership" });
