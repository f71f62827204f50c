import {
  decodePublicKey,
  HELD_OUT_METRICS,
  HeldOutMetric,
  MAX_ROTATION_CERTIFICATES,
  pauseReasonsSchema,
} from "@barnraise/protocol";
import { z } from "zod";
import { queryFiniteNumber, queryInteger } from "./public.ts";

/**
 * The API that peer and aux programs call: join (authenticated by a peer token in the body) and the
 * routes an aux peer calls with a signed request (`Authorization: Barnraise <signed request>`).
 */

const count = z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER);
const nonNegative = z.number().nonnegative().max(Number.MAX_VALUE);

/** A peer's Ed25519 public key: 32 bytes as unpadded base64url, a usable (large-order) curve point. */
export const peerPublicKeySchema = z
  .string()
  .regex(/^[A-Za-z0-9_-]{43}$/, "must be 32 bytes as unpadded base64url")
  .transform((text, ctx) => {
    try {
      return decodePublicKey(text);
    } catch {
      ctx.addIssue({ code: "custom", message: "is not a usable Ed25519 public key" });
      return z.NEVER;
    }
  })
  .meta({ description: "The node's Ed25519 public key (its libp2p identity), unpadded base64url" });

export const joinRequestSchema = z
  .strictObject({
    token: z.string().min(1).max(256).meta({
      description: "A peer token (brp_…); on the experiment-scoped route it must belong to that experiment",
    }),
    publicKey: peerPublicKeySchema,
  })
  .meta({ id: "JoinRequest" });
export type JoinRequest = z.output<typeof joinRequestSchema>;

export const browserJoinRequestSchema = z
  .strictObject({ publicKey: peerPublicKeySchema })
  .meta({ id: "BrowserJoinRequest" });
export type BrowserJoinRequest = z.output<typeof browserJoinRequestSchema>;

/** The latest authority rotation certificates, as join and run control answers carry them. */
const authorityRotationsSchema = z
  .array(z.string())
  .max(MAX_ROTATION_CERTIFICATES)
  .meta({
    description:
      "The latest rotation certificates of the authority key, oldest first (at most 16): each names a " +
      "new key and is signed by the key it replaced, so a node that trusts an older key follows the " +
      "chain to `authorityPublicKey` (see packages/protocol, authority-rotation.ts). Empty until the " +
      "organizer rotates the key",
  });

export const joinResponseSchema = z
  .strictObject({
    pass: z.string().meta({ description: "The access pass, signed by the experiment's authority key" }),
    passExpiresAt: z.iso.datetime().meta({ description: "Join again before this to refresh the pass" }),
    authorityPublicKey: z
      .string()
      .meta({ description: "The experiment's authority key, unpadded base64url" }),
    signedConfig: z.string().meta({ description: "The experiment config, signed by the authority key" }),
    initialPeers: z
      .array(z.string())
      .meta({ description: "Multiaddrs of aux peers seen in the last 10 minutes, most recent first" }),
    experiment: z.strictObject({ id: z.string(), name: z.string() }),
    authorityRotations: authorityRotationsSchema,
  })
  .meta({ id: "JoinResponse" });
export type JoinResponse = z.infer<typeof joinResponseSchema>;

export const MAX_MULTIADDRS = 8;
export const MAX_MULTIADDR_LENGTH = 512;

export const registerAddressRequestSchema = z
  .strictObject({
    multiaddrs: z
      .array(
        z
          .string()
          .max(MAX_MULTIADDR_LENGTH)
          .regex(/^\/[\x21-\x7e]+$/, "must be a multiaddr: printable characters starting with '/'"),
      )
      .min(1)
      .max(MAX_MULTIADDRS)
      .meta({ description: "Where other peers can dial this aux peer; each ends with /p2p/<its PeerId>" }),
  })
  .meta({ id: "RegisterAddressRequest" });
export type RegisterAddressRequest = z.infer<typeof registerAddressRequestSchema>;

export const okResponseSchema = z.strictObject({ ok: z.literal(true) }).meta({ id: "Ok" });

export const MAX_METRICS_BODY_BYTES = 256 * 1024;
export const MAX_REPORTED_PEERS = 10_000;

/** A peer process's session id: random per process start. */
export const MAX_SESSION_LENGTH = 32;

export const peerContributionReportSchema = z
  .strictObject({
    peerId: z.string().min(1).max(128),
    session: z
      .string()
      .max(MAX_SESSION_LENGTH)
      .regex(/^[A-Za-z0-9_-]*$/, "must be letters, digits, '_' or '-'")
      .default("")
      .meta({
        description:
          "The peer process's session id (random per start, ≤ 32 characters); counters are kept per session, so a restarted node keeps the credit of each",
      }),
    samples: count.meta({
      description:
        "Samples the peer put into collaborative steps in this session (cumulative); samples of steps it took alone while others trained do not count",
    }),
    computeSeconds: nonNegative.meta({ description: "Seconds spent computing (cumulative)" }),
    bytesAggregated: count.meta({ description: "Bytes reduced for others (cumulative)" }),
    sessionSeconds: nonNegative.meta({ description: "Length of the peer's current uninterrupted session" }),
    averaging: z.boolean().optional().meta({
      description:
        "Trainers: false when the peer has put no samples into a collaborative step for a while (it trains alone or cannot reach the others), so it is shown as not counted; absent when the aux cannot tell yet",
    }),
  })
  .meta({ id: "PeerContributionReport" });

export const metricsReportSchema = z
  .strictObject({
    step: count,
    loss: z.number(),
    samplesPerSecond: nonNegative,
    alivePeers: count,
    time: count.meta({ description: "When the step was aggregated, Unix time in milliseconds" }),
    generation: count.default(0).meta({
      description: "The rollback generation the step was trained in; an older one than the run's is refused",
    }),
    bytesPerPeer: nonNegative.optional().meta({
      description:
        "Mean bytes each trainer sent on the wire in this step's averaging round (all-reduce); older aux programs leave it out",
    }),
    utilization: z.number().min(0).max(1).optional().meta({
      description:
        "The share of the trainers' wall time spent computing during this step, 0 to 1; older aux programs leave it out",
    }),
    samples: nonNegative.optional().meta({
      description:
        "The samples that went into this step: the sum of the weights the aux accepted in its averaging round; left out when the aux did not reduce a part of that round",
    }),
    peers: z.array(peerContributionReportSchema).max(MAX_REPORTED_PEERS),
  })
  .meta({ id: "MetricsReport", description: "One aggregated collaborative step" });
export type MetricsReport = z.output<typeof metricsReportSchema>;

export const metricsIngestedSchema = z
  .strictObject({
    ok: z.literal(true),
    unknownPeers: count.meta({ description: "Reported peers this experiment does not know (ignored)" }),
    stored: z.boolean().meta({
      description:
        "False when the current timeline already had this step: recorded steps are never overwritten",
    }),
    timeline: count.meta({ description: "The run's current timeline" }),
    lastStep: count
      .nullable()
      .meta({ description: "The highest step recorded in the current timeline, null when none is" }),
  })
  .meta({ id: "MetricsIngested" });
export type MetricsIngested = z.infer<typeof metricsIngestedSchema>;

export const checkpointUploadQuerySchema = z.object({
  step: queryInteger(0, Number.MAX_SAFE_INTEGER),
  loss: queryFiniteNumber.optional(),
  sizeBytes: queryInteger(1, Number.MAX_SAFE_INTEGER).meta({
    description: "The exact length of the body; it must equal Content-Length when that is sent",
  }),
  generation: queryInteger(0, Number.MAX_SAFE_INTEGER)
    .default(0)
    .meta({ description: "The rollback generation the state was trained in (default 0)" }),
});
export type CheckpointUploadQuery = z.output<typeof checkpointUploadQuerySchema>;

export const runControlResponseSchema = z
  .strictObject({
    control: z.string().meta({
      description:
        "The run control (status, generation, rollback checkpoint, revoked usernames and tokens), signed now by the experiment's authority key",
    }),
    authorityRotations: authorityRotationsSchema,
  })
  .meta({ id: "RunControlResponse" });
export type RunControlResponse = z.infer<typeof runControlResponseSchema>;

export const MAX_SMALL_BODY_BYTES = 4 * 1024;

export const forkTimelineRequestSchema = z
  .strictObject({
    fromStep: count.meta({ description: "The step of the state the swarm restarted from" }),
    reason: z.literal("resumed"),
  })
  .meta({ id: "ForkTimelineRequest" });
export type ForkTimelineRequest = z.infer<typeof forkTimelineRequestSchema>;

export const timelineResponseSchema = z
  .strictObject({
    timeline: count.meta({ description: "The run's current timeline, after the call" }),
    forked: z.boolean().meta({ description: "Whether the call started a new timeline" }),
    lastStep: count
      .nullable()
      .meta({ description: "The highest step recorded in the current timeline, null when none is" }),
  })
  .meta({ id: "TimelineResponse" });
export type TimelineResponse = z.infer<typeof timelineResponseSchema>;

/** A libp2p PeerId as text (base58btc). */
const peerIdText = z
  .string()
  .regex(/^[1-9A-HJ-NP-Za-km-z]{1,128}$/, "must be a libp2p PeerId (base58btc)")
  .meta({ examples: ["12D3KooW…"] });

/** Most trainers and most refusals one heartbeat may list. */
export const MAX_HEARTBEAT_TRAINERS = 2_000;
export const MAX_HEARTBEAT_REFUSALS = 256;
/** Largest heartbeat body: its lists of trainers and refusals. */
export const MAX_HEARTBEAT_BODY_BYTES = 512 * 1024;

export const swarmRefusalReportSchema = z
  .strictObject({
    peerId: peerIdText.meta({ description: "The node whose pass the aux refused" }),
    code: z
      .string()
      .regex(/^[A-Z][A-Z0-9_]{0,63}$/, "must be an error code like PASS_REVOKED")
      .meta({ description: "Why: the refusal's code (PASS_REVOKED, PASS_EXPIRED, PASS_BAD_SIGNATURE …)" }),
    reason: z.string().max(512).meta({ description: "The refusal in words" }),
    at: count.meta({ description: "When the aux last refused it, Unix time in milliseconds" }),
  })
  .meta({ id: "SwarmRefusalReport" });

export const implausibleRecordReportSchema = z
  .strictObject({
    peerId: peerIdText.meta({ description: "The trainer whose progress records the aux refused" }),
    reason: z.string().max(512).meta({ description: "Why its latest refused record could not be true" }),
    count: count.meta({ description: "Its records this aux refused so far" }),
    at: count.meta({ description: "When the aux last refused one, Unix time in milliseconds" }),
  })
  .meta({ id: "ImplausibleRecordReport" });

export const swarmSplitReportSchema = z
  .strictObject({
    kind: z.enum(["diverged", "alone"]).meta({
      description:
        "diverged: trainers hold different parameters at one step; alone: a trainer steps with no other trainer while others train",
    }),
    step: count,
    since: count.meta({ description: "When the aux first saw this split, Unix time in milliseconds" }),
    groups: z
      .array(
        z.strictObject({
          digest: z
            .string()
            .regex(/^[0-9a-f]{16}$/)
            .nullable()
            .meta({ description: "The state fingerprint this side holds at the step (diverged)" }),
          peers: z.array(peerIdText).max(64),
        }),
      )
      .min(2)
      .max(16),
    summary: z.string().max(1000),
  })
  .meta({ id: "SwarmSplitReport", description: "The swarm trains more than one model" });
export type SwarmSplitReport = z.infer<typeof swarmSplitReportSchema>;

export const swarmStatusReportSchema = z
  .strictObject({
    alivePeers: count.meta({ description: "Trainers with fresh progress records" }),
    samplesPerSecond: nonNegative,
    step: count.meta({ description: "The swarm's current step" }),
    time: count.meta({ description: "When the aux peer measured it, Unix time in milliseconds" }),
    trainers: z
      .array(
        z.strictObject({
          peerId: peerIdText,
          averaging: z.boolean().optional().meta({
            description:
              "Whether its samples went into collaborative steps lately; absent while the aux cannot tell yet",
          }),
          paused: pauseReasonsSchema.optional().meta({
            description:
              "Why its volunteer's rules hold it now (in-use, busy, battery, schedule, too-hot, hidden, volunteer), as its progress records say; absent while it trains",
          }),
        }),
      )
      .max(MAX_HEARTBEAT_TRAINERS)
      .default([])
      .meta({ description: "The trainers the swarm accepts now (fresh progress records reached this aux)" }),
    refused: z
      .array(swarmRefusalReportSchema)
      .max(MAX_HEARTBEAT_REFUSALS)
      .default([])
      .meta({ description: "Nodes whose pass this aux refused lately, and why" }),
    implausible: z.array(implausibleRecordReportSchema).max(MAX_HEARTBEAT_REFUSALS).default([]).meta({
      description:
        "Trainers whose progress records this aux refused lately as implausible (claims no trainer could make), and why",
    }),
    split: swarmSplitReportSchema
      .nullable()
      .default(null)
      .meta({ description: "The swarm's split, while the aux sees one; null while it trains one model" }),
  })
  .meta({ id: "SwarmStatusReport", description: "The aux peer's heartbeat, every 5 s" });
export type SwarmStatusReport = z.output<typeof swarmStatusReportSchema>;

/** A 32-bit integer column. */
const int32 = z
  .number()
  .int()
  .nonnegative()
  .max(2 ** 31 - 1);

/** The most samples a validator's verdict may look back on. */
export const MAX_VALIDATOR_SAMPLES = 64;

export const validatorFlagRequestSchema = z
  .strictObject({
    peerId: z
      .string()
      .regex(/^[1-9A-HJ-NP-Za-km-z]{1,128}$/, "must be a libp2p PeerId (base58btc)")
      .meta({ description: "The flagged trainer node's PeerId", examples: ["12D3KooW…"] }),
    epoch: int32.meta({ description: "The epoch of the round whose contribution hurt last" }),
    generation: int32.meta({ description: "The run generation (rollbacks so far) of that round" }),
    firstHurtEpoch: int32.meta({
      description: "The earliest epoch among the node's recent samples that hurt (at most `epoch`)",
    }),
    baselineLoss: nonNegative.meta({
      description: "The held-out loss at the aux's state, on the validator's fixed subset of the test split",
    }),
    lossAfter: nonNegative
      .nullable()
      .meta({ description: "The loss after the node's step; null when it was not finite" }),
    medianDelta: z
      .number()
      .meta({ description: "The median change of loss of the round's sampled senders' steps" }),
    normRatio: nonNegative.meta({
      description: "The ℓ2 norm of the node's contribution over the median of the round's sampled senders",
    }),
    hurtSamples: z.number().int().min(1).max(MAX_VALIDATOR_SAMPLES).meta({
      description: "How many of the node's last `recentSamples` scored samples hurt",
    }),
    recentSamples: z.number().int().min(1).max(MAX_VALIDATOR_SAMPLES),
  })
  .superRefine((flag, ctx) => {
    if (flag.hurtSamples > flag.recentSamples) {
      ctx.addIssue({ code: "custom", path: ["hurtSamples"], message: "must be at most recentSamples" });
    }
    if (flag.firstHurtEpoch > flag.epoch) {
      ctx.addIssue({ code: "custom", path: ["firstHurtEpoch"], message: "must be at most epoch" });
    }
  })
  .meta({
    id: "ValidatorFlagRequest",
    description:
      "The aux's validator found a trainer's contributions raising the held-out loss: the evidence of its latest sample",
  });
export type ValidatorFlagRequest = z.output<typeof validatorFlagRequestSchema>;

export const checkpointEvaluationRequestSchema = z
  .strictObject({
    metric: z.enum(HELD_OUT_METRICS).meta({
      description:
        "What the experiment's model is judged by: accuracy (classifiers), perplexity (language models) or mae (a regression's mean absolute error); another than the model's is refused",
    }),
    value: z.number().nonnegative().meta({
      description: "The metric on the test split: accuracy in [0, 1], perplexity ≥ 1, mae ≥ 0",
    }),
    loss: z.number().nonnegative().meta({ description: "The mean loss over the predictions scored" }),
    samples: z
      .number()
      .int()
      .positive()
      // The column is a 32-bit integer.
      .max(2 ** 31 - 1)
      .meta({ description: "Predictions scored: test rows, or predicted tokens for a language model" }),
  })
  .superRefine((evaluation, ctx) => {
    const { metric, value } = evaluation;
    if (metric === HeldOutMetric.accuracy && value > 1) {
      ctx.addIssue({ code: "custom", path: ["value"], message: "an accuracy is at most 1" });
    }
    if (metric === HeldOutMetric.perplexity && value < 1) {
      ctx.addIssue({ code: "custom", path: ["value"], message: "a perplexity is at least 1" });
    }
  })
  .meta({
    id: "CheckpointEvaluationRequest",
    description: "The aux peer's held-out evaluation of one checkpoint on the dataset's test split",
  });
export type CheckpointEvaluationRequest = z.output<typeof checkpointEvaluationRequestSchema>;
