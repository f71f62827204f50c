import { experimentConfigSchema, ModelPreset } from "@barnraise/protocol";
import { z } from "zod";
import { createExperimentInputSchema } from "../../server/services/create-experiment.ts";
import { discardMetricPointsInputSchema } from "../../server/services/discard-metric-points.ts";
import { rollBackExperimentInputSchema } from "../../server/services/roll-back-experiment.ts";
import { rotateAuthorityKeyInputSchema } from "../../server/services/rotate-authority-key.ts";
import { setExperimentStatusInputSchema } from "../../server/services/set-experiment-status.ts";
import { updateExperimentInputSchema } from "../../server/services/update-experiment.ts";
import { swarmStatusSchema } from "./public.ts";

/**
 * Experiments. Request bodies are the services' own schemas; the config field is the protocol's
 * experiment config schema, documented once as ExperimentConfig (input: every field optional;
 * output: the complete config with defaults applied).
 */

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
    modelPreset: z.enum([ModelPreset.mnistMlp, ModelPreset.albertMlm]),
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
