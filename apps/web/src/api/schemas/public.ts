import { HELD_OUT_METRICS } from "@barnraise/protocol";
import { z } from "zod";

/**
 * The public read API of an experiment (anyone may call it): the loss curve, the leaderboard and the
 * checkpoints. Dates are ISO 8601 strings; 64-bit counters are sent as JSON numbers.
 */

/** A decimal integer in a query string, e.g. `?step=120`: digits only, no sign, no exponent. */
export function queryInteger(min: number, max: number) {
  return z
    .string()
    .regex(/^\d{1,16}$/, "must be a decimal integer")
    .transform(Number)
    .pipe(z.number().int().min(min).max(max));
}

/** A finite decimal number in a query string, e.g. `?loss=0.31` or `?loss=3.1e-1`. */
export const queryFiniteNumber = z
  .string()
  .regex(/^-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/, "must be a decimal number")
  .transform(Number)
  .pipe(z.number());

const isoDate = z.iso.datetime().meta({ examples: ["2026-11-21T10:00:00.000Z"] });
const count = z.number().int().nonnegative();

export const experimentIdParamSchema = z.object({
  id: z.string().meta({ description: "The experiment's id", examples: ["demo"] }),
});

export const DEFAULT_METRIC_POINTS = 500;
export const MAX_METRIC_POINTS = 5000;

export const readMetricsQuerySchema = z.object({
  maxPoints: queryInteger(2, MAX_METRIC_POINTS)
    .optional()
    .meta({
      description: `At most this many points (default ${DEFAULT_METRIC_POINTS}); a longer run is downsampled with LTTB on loss`,
    }),
});

export const metricPointSchema = z
  .strictObject({
    step: count,
    loss: z.number(),
    samplesPerSecond: z.number().nonnegative(),
    alivePeers: count,
    bytesPerPeer: z.number().nonnegative().nullable().meta({
      description:
        "Mean bytes each trainer sent in the step's averaging round (all-reduce); null when the aux did not report it",
    }),
    utilization: z.number().min(0).max(1).nullable().meta({
      description:
        "The share of the trainers' wall time spent computing during the step, 0 to 1; null when the aux did not report it",
    }),
    samples: z.number().nonnegative().nullable().meta({
      description:
        "The samples that went into the step: the sum of the weights the aux accepted in its averaging round, each held against what its sender's progress records earned; null when the aux did not reduce a part of that round",
    }),
    recordedAt: isoDate,
    timeline: count.meta({
      description:
        "The curve the step belongs to: a new timeline starts when the run is rolled back or resumes behind its last recorded step",
    }),
    discarded: z.boolean().meta({
      description:
        "True when a later timeline restarted from an earlier step: the run no longer builds on this point",
    }),
  })
  .meta({ id: "MetricPoint", description: "One collaborative step, as aggregated by an aux monitor" });
export type MetricPoint = z.infer<typeof metricPointSchema>;

export const RunEventKind = { resumed: "resumed", rolledBack: "rolled-back" } as const;
export type RunEventKind = (typeof RunEventKind)[keyof typeof RunEventKind];

export const runEventSchema = z
  .strictObject({
    kind: z.enum([RunEventKind.resumed, RunEventKind.rolledBack]).meta({
      description:
        "resumed: the swarm restarted from an earlier state (reported by an aux peer); rolled-back: the organizer rolled the run back to a checkpoint",
    }),
    step: count.meta({ description: "The step the new timeline starts from" }),
    fromStep: count
      .nullable()
      .meta({ description: "The last step recorded before the event, null when none was" }),
    timeline: count.meta({ description: "The timeline the event starts" }),
    checkpointId: z
      .string()
      .nullable()
      .meta({ description: "The checkpoint rolled back to; null for a resume" }),
    at: isoDate,
  })
  .meta({ id: "RunEvent", description: "A restart of the run's curve from an earlier step" });
export type RunEventView = z.infer<typeof runEventSchema>;

export const metricSeriesSchema = z
  .strictObject({
    points: z
      .array(metricPointSchema)
      .meta({ description: "Ascending by timeline, then by step; every timeline's points are included" }),
    total: count.meta({ description: "How many steps are recorded before downsampling" }),
    events: z.array(runEventSchema).meta({ description: "The run's restarts, oldest first" }),
  })
  .meta({ id: "MetricSeries" });
export type MetricSeries = z.infer<typeof metricSeriesSchema>;

/** A swarm counts as alive while its aux peer's heartbeat is at most this old. */
export const SWARM_FRESH_MS = 30_000;

export const swarmStatusSchema = z
  .strictObject({
    alivePeers: count.meta({
      description:
        "Trainers with fresh progress, from the aux peer's last heartbeat; 0 when it is older than 30 s",
    }),
    samplesPerSecond: z.number().nonnegative(),
    seenAt: isoDate.nullable().meta({ description: "The last heartbeat, null before the first" }),
    waitingSince: isoDate.nullable().meta({
      description: "While no trainer is alive: since when the run has been waiting; null otherwise",
    }),
    split: z
      .strictObject({
        kind: z.enum(["diverged", "alone"]),
        step: count,
        since: isoDate,
        summary: z.string(),
        groups: z.array(z.strictObject({ digest: z.string().nullable(), peers: z.array(z.string()) })),
      })
      .nullable()
      .meta({
        description:
          "While the aux reports that the swarm trains more than one model (two states at one step, or a trainer alone while others train): what it saw and since when; null otherwise",
      }),
  })
  .meta({ id: "SwarmStatus", description: "The live swarm as its aux peer last reported it" });
export type SwarmStatusView = z.infer<typeof swarmStatusSchema>;

/**
 * What kind of node a machine is, from the token it joined with (`PeerToken.browser`), never from
 * what the node says of itself: `browser`, a signed-in volunteer's tab ("Contribute from this
 * browser"); `cli`, a machine that joined with a token (a command-line peer or an aux peer).
 */
export const NodeKind = { browser: "browser", cli: "cli" } as const;
export type NodeKind = (typeof NodeKind)[keyof typeof NodeKind];

/** Every node kind, in the order `nodeKinds` lists them. */
export const NODE_KINDS = [NodeKind.browser, NodeKind.cli] as const;

export const leaderboardEntrySchema = z
  .strictObject({
    username: z.string(),
    samples: count.meta({ description: "Training samples processed, summed over the user's nodes" }),
    computeSeconds: z.number().nonnegative(),
    bytesAggregated: count.meta({ description: "Bytes reduced for others as an averaging helper" }),
    longestSessionSeconds: z
      .number()
      .nonnegative()
      .meta({ description: "The longest uninterrupted session of any of the user's nodes" }),
    peers: count.meta({ description: "How many of the user's nodes contributed" }),
    nodeKinds: z.array(z.enum(NODE_KINDS)).meta({
      description:
        "The kinds of the nodes counted in this entry, each once, browser before cli: browser for a signed-in volunteer's tab, cli for a machine that joined with a token (a command-line or aux peer); taken from the tokens the nodes joined with",
      examples: [["browser", "cli"]],
    }),
  })
  .meta({ id: "LeaderboardEntry" });
export type LeaderboardEntry = z.infer<typeof leaderboardEntrySchema>;

export const leaderboardSchema = z
  .strictObject({
    entries: z.array(leaderboardEntrySchema).meta({ description: "Most samples first" }),
  })
  .meta({ id: "Leaderboard" });
export type Leaderboard = z.infer<typeof leaderboardSchema>;

export const checkpointEvaluationSchema = z
  .strictObject({
    metric: z.enum(HELD_OUT_METRICS).meta({
      description:
        "accuracy (classifiers, 0 to 1), perplexity (language models, exp of the mean cross-entropy over the predicted tokens) or mae (a regression's mean absolute error)",
    }),
    value: z.number(),
    loss: z.number().meta({ description: "The mean loss over the predictions scored" }),
    samples: count.meta({ description: "Predictions scored: test rows, or predicted tokens" }),
    evaluatedAt: isoDate,
  })
  .meta({
    id: "CheckpointEvaluation",
    description: "The checkpoint's score on the dataset's test split, computed by the organizer's aux peer",
  });
export type CheckpointEvaluationView = z.infer<typeof checkpointEvaluationSchema>;

export const checkpointSchema = z
  .strictObject({
    id: z.string(),
    step: count,
    loss: z.number().nullable(),
    sizeBytes: count,
    sha256: z
      .string()
      .regex(/^[0-9a-f]{64}$/)
      .meta({ description: "SHA-256 of the file, lowercase hex" }),
    generation: count.meta({ description: "The rollback generation the checkpoint was trained in" }),
    timeline: count.meta({ description: "The metric timeline current when it was uploaded" }),
    createdAt: isoDate,
    downloadUrl: z.string().meta({ examples: ["/api/v1/experiments/demo/checkpoints/cm0abc"] }),
    safetensorsUrl: z.string().meta({
      description: "The model weights alone, as safetensors",
      examples: ["/api/v1/experiments/demo/checkpoints/cm0abc/safetensors"],
    }),
    tfjsUrl: z
      .string()
      .nullable()
      .meta({
        description:
          "The checkpoint as a TensorFlow.js Layers model: the model.json that `tf.loadLayersModel` opens " +
          "(its weights, `weights.bin`, lie beside it); null for a model with no TF.js form (albert-mlm)",
        examples: ["/api/v1/experiments/demo/checkpoints/cm0abc/tfjs/model.json"],
      }),
    evaluation: checkpointEvaluationSchema
      .nullable()
      .meta({ description: "The held-out evaluation; null until the aux peer has scored the checkpoint" }),
  })
  .meta({ id: "Checkpoint" });
export type CheckpointView = z.infer<typeof checkpointSchema>;

export const checkpointListSchema = z
  .strictObject({
    checkpoints: z.array(checkpointSchema).meta({ description: "Newest step first" }),
  })
  .meta({ id: "CheckpointList" });
export type CheckpointList = z.infer<typeof checkpointListSchema>;

export const latestCheckpointSchema = z
  .strictObject({
    checkpoint: checkpointSchema,
    attestation: z.string().meta({
      description:
        "The checkpoint's attestation (experiment, step, generation, timeline, SHA-256, size, config version), signed now by the experiment's authority key",
    }),
  })
  .meta({ id: "LatestCheckpoint", description: "The checkpoint a run resumes from" });
export type LatestCheckpoint = z.infer<typeof latestCheckpointSchema>;
