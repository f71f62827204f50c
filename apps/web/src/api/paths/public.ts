import { z } from "zod";
import type {
  ZodOpenApiOperationObject,
  ZodOpenApiPathsObject,
  ZodOpenApiResponsesObject,
} from "zod-openapi";
import { errorBodySchema } from "../schemas/errors.ts";
import {
  checkpointListSchema,
  experimentIdParamSchema,
  latestCheckpointSchema,
  leaderboardSchema,
  metricSeriesSchema,
  readMetricsQuerySchema,
} from "../schemas/public.ts";

/**
 * The public read API of an experiment: loss curve, leaderboard, checkpoints. The metrics and
 * checkpoint-list reads share their paths with the aux peer's signed POSTs, so paths/peer.ts lists
 * those paths with both operations (a path may appear in one paths object only).
 */

/** An error response (`ErrorResponse`) whose description names the codes a route returns with that status. */
export function errorResponse(description: string) {
  return { description, content: { "application/json": { schema: errorBodySchema } } };
}

const notFound = {
  "404": errorResponse("NOT_FOUND: no such experiment"),
} satisfies ZodOpenApiResponsesObject;

export const readMetricsOperation: ZodOpenApiOperationObject = {
  tags: ["public"],
  summary:
    "Each step's loss, throughput, peers, bytes sent per peer and utilization, on every timeline, downsampled for long runs, with the run's restarts",
  description:
    "Metric rows are never overwritten. A rollback, or a resume from a state behind the last " +
    "recorded step, starts a new timeline (listed in `events`); the points of an older timeline " +
    "after the step a later timeline restarted from are `discarded`.",
  requestParams: { path: experimentIdParamSchema, query: readMetricsQuerySchema },
  responses: {
    "200": {
      description: "Recorded steps, ascending",
      content: { "application/json": { schema: metricSeriesSchema } },
    },
    "400": errorResponse("INVALID_INPUT: maxPoints is not an integer from 2 to 5000"),
    ...notFound,
  },
};

export const listCheckpointsOperation: ZodOpenApiOperationObject = {
  tags: ["public"],
  summary: "The checkpoints, newest step first",
  requestParams: { path: experimentIdParamSchema },
  responses: {
    "200": { description: "Checkpoints", content: { "application/json": { schema: checkpointListSchema } } },
    ...notFound,
  },
};

export const publicPaths: ZodOpenApiPathsObject = {
  "/api/v1/experiments/{id}/checkpoints/latest": {
    get: {
      tags: ["public"],
      summary: "The checkpoint a run resumes from, with a fresh attestation",
      description:
        "The newest checkpoint (highest step, then newest) of the run's current rollback generation, " +
        "else the checkpoint it was last rolled back to. The attestation is signed at read time by " +
        "the experiment's current authority key; check it, then the file's SHA-256 and size against " +
        "it. Shares the public reads' per-address rate limit.",
      requestParams: { path: experimentIdParamSchema },
      responses: {
        "200": {
          description: "The checkpoint and its attestation",
          content: { "application/json": { schema: latestCheckpointSchema } },
        },
        "404": errorResponse("NOT_FOUND: no such experiment, or it has no checkpoint to resume from"),
        "429": errorResponse("RATE_LIMITED"),
      },
    },
  },
  "/api/v1/experiments/{id}/leaderboard": {
    get: {
      tags: ["public"],
      summary: "What each user's nodes contributed",
      requestParams: { path: experimentIdParamSchema },
      responses: {
        "200": {
          description: "One entry per user, most samples first",
          content: { "application/json": { schema: leaderboardSchema } },
        },
        ...notFound,
      },
    },
  },
  "/api/v1/experiments/{id}/checkpoints/{checkpointId}": {
    get: {
      tags: ["public"],
      summary: "Download a checkpoint",
      description:
        "The file, with `ETag` (its SHA-256), `Content-Disposition: attachment` and single-range " +
        "support (`Range: bytes=a-b`, `a-` or `-n`).",
      requestParams: {
        path: experimentIdParamSchema.extend({ checkpointId: z.string() }),
        header: z.object({
          range: z
            .string()
            .optional()
            .meta({ examples: ["bytes=0-1023"] }),
        }),
      },
      responses: {
        "200": {
          description: "The whole file",
          content: { "application/octet-stream": { schema: z.string().meta({ format: "binary" }) } },
        },
        "206": {
          description: "The requested range",
          content: { "application/octet-stream": { schema: z.string().meta({ format: "binary" }) } },
        },
        "304": { description: "Not modified (If-None-Match matched the ETag)" },
        "404": errorResponse("NOT_FOUND: no such experiment or checkpoint"),
        "416": errorResponse("RANGE_NOT_SATISFIABLE: the range starts beyond the end of the file"),
      },
    },
  },
  "/api/v1/experiments/{id}/checkpoints/{checkpointId}/safetensors": {
    get: {
      tags: ["public"],
      summary: "Download a checkpoint's weights as safetensors",
      description:
        "The model weights of the checkpoint in the safetensors format (Hugging Face's; `safetensors` " +
        "in Python reads it): one float32 tensor per parameter tensor of the experiment's model, named " +
        "as the swarm names them (e.g. `hidden0.kernel` [784, 128], kernels as [inputs, outputs]; an " +
        "uploaded model's trainable weights under their TF.js names, e.g. `dense_Dense1/kernel`), with " +
        "the experiment, step, checkpoint SHA-256 and model config under `__metadata__`. The optimizer " +
        "state is left out (the checkpoint file itself keeps it, for resuming).",
      requestParams: { path: experimentIdParamSchema.extend({ checkpointId: z.string() }) },
      responses: {
        "200": {
          description: "The safetensors file",
          content: { "application/octet-stream": { schema: z.string().meta({ format: "binary" }) } },
        },
        "404": errorResponse("NOT_FOUND: no such experiment or checkpoint"),
        "409": errorResponse("CONFLICT: the checkpoint does not hold this experiment's model"),
      },
    },
  },
  "/api/v1/experiments/{id}/checkpoints/{checkpointId}/tfjs/model.json": {
    get: {
      tags: ["public"],
      summary: "A checkpoint as a TensorFlow.js Layers model (model.json)",
      description:
        'The model.json of the checkpoint as a TF.js Layers model: `tf.loadLayersModel("<this URL>")` ' +
        "loads it and fetches its weights from `weights.bin` beside it. For an uploaded model, its " +
        "topology, with the checkpoint's trainable weights and the uploaded frozen ones; for mnist-mlp, " +
        "Dense layers `hidden0`, …, `output` (weights `hidden0/kernel`, …) with the config's activation " +
        "and a linear output (logits): a Sequential, or with GELU a functional model that spells out the " +
        "peers' tanh approximation with weightless layers. albert-mlm has no TF.js form. Public and " +
        "immutable, with an `ETag` and `Access-Control-Allow-Origin: *`.",
      requestParams: { path: experimentIdParamSchema.extend({ checkpointId: z.string() }) },
      responses: {
        "200": {
          description: "The model.json (format layers-model, one weights group naming weights.bin)",
          content: { "application/json": { schema: z.record(z.string(), z.unknown()) } },
        },
        "304": { description: "Not modified (If-None-Match matched the ETag)" },
        "404": errorResponse("NOT_FOUND: no such experiment or checkpoint"),
        "409": errorResponse(
          "CONFLICT: the model has no TF.js Layers form (albert-mlm: use the safetensors export), or the " +
            "checkpoint does not hold this experiment's model",
        ),
      },
    },
  },
  "/api/v1/experiments/{id}/checkpoints/{checkpointId}/tfjs/weights.bin": {
    get: {
      tags: ["public"],
      summary: "A checkpoint as a TensorFlow.js Layers model (weights.bin)",
      description:
        "The weights the checkpoint's TF.js model.json lists, float32 little-endian in manifest order, " +
        "with `ETag` and single-range support (`Range: bytes=a-b`, `a-` or `-n`).",
      requestParams: {
        path: experimentIdParamSchema.extend({ checkpointId: z.string() }),
        header: z.object({
          range: z
            .string()
            .optional()
            .meta({ examples: ["bytes=0-1023"] }),
        }),
      },
      responses: {
        "200": {
          description: "The whole weights file",
          content: { "application/octet-stream": { schema: z.string().meta({ format: "binary" }) } },
        },
        "206": {
          description: "The requested range",
          content: { "application/octet-stream": { schema: z.string().meta({ format: "binary" }) } },
        },
        "304": { description: "Not modified (If-None-Match matched the ETag)" },
        "404": errorResponse("NOT_FOUND: no such experiment or checkpoint"),
        "409": errorResponse(
          "CONFLICT: the model has no TF.js Layers form (albert-mlm), or the checkpoint does not hold this experiment's model",
        ),
        "416": errorResponse("RANGE_NOT_SATISFIABLE: the range starts beyond the end of the file"),
      },
    },
  },
};
