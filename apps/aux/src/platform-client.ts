import {
  jsonBody,
  PlatformClient,
  PlatformClientErrorCode,
  PlatformRequestError,
  type PlatformClientOptions,
} from "@barnraise/swarm";
import { uploadFileAt } from "@barnraise/swarm/node";
import type { HeldOutMetric, PauseReason } from "@barnraise/protocol";
import { z } from "zod";
import type { SplitReport } from "./monitor/split-watch.ts";
import type { ContributionFlag } from "./roles/contribution-validator.ts";

export {
  DEFAULT_PLATFORM_TIMEOUT_MS as DEFAULT_REQUEST_TIMEOUT_MS,
  isPlatformRequestError,
  MAX_RESPONSE_BYTES,
  PlatformClientErrorCode,
  PlatformRequestError,
  TRANSFER_TIMEOUT_FACTOR as UPLOAD_TIMEOUT_FACTOR,
} from "@barnraise/swarm";

/**
 * The aux peer's side of the platform routes only it calls, as signed requests through the node's
 * `PlatformClient`: register its address, post aggregated metrics and the swarm's liveness, upload a
 * checkpoint and its held-out evaluation, flag a trainer whose contributions hurt, and report that
 * the swarm resumed from an older state (a new timeline of the run).
 */

export type AuxPlatformClientOptions = PlatformClientOptions;

/** One aggregated collaborative step, as `POST …/metrics` takes it. */
export interface MetricsReportBody {
  /** The rollback generation of the state the step was trained on. */
  readonly generation: number;
  readonly step: number;
  readonly loss: number;
  readonly samplesPerSecond: number;
  readonly alivePeers: number;
  /** When the step was aggregated, Unix milliseconds. */
  readonly time: number;
  /** Mean bytes each trainer sent in the step's all-reduce. */
  readonly bytesPerPeer?: number;
  /** Share of the trainers' wall time spent computing in the step, in [0, 1]. */
  readonly utilization?: number;
  /** The samples the aux accepted into the step's averaging round (Σ of the senders' weights). */
  readonly samples?: number;
  /** Each peer's cumulative contribution. */
  readonly peers: readonly {
    readonly peerId: string;
    /** The peer's process run, so that a restarted node keeps each run's credit. */
    readonly session?: string;
    readonly samples: number;
    readonly computeSeconds: number;
    readonly bytesAggregated: number;
    readonly sessionSeconds: number;
    /** Whether the trainer put samples into a collaborative step recently; absent when unknown. */
    readonly averaging?: boolean;
  }[];
}

/** A checkpoint the platform stored. */
export interface UploadedCheckpoint {
  readonly id: string;
  readonly step: number;
  readonly loss: number | null;
  readonly sizeBytes: number;
  /** SHA-256 of the file, lowercase hex. */
  readonly sha256: string;
  /** ISO 8601. */
  readonly createdAt: string;
  /** The download path on the platform, e.g. `/api/v1/experiments/demo/checkpoints/cm0abc`. */
  readonly downloadUrl: string;
}

/** A checkpoint file to upload: where it is, its size and its SHA-256 (32 bytes). */
export interface CheckpointFile {
  readonly path: string;
  readonly sizeBytes: number;
  readonly sha256: Uint8Array;
}

export interface CheckpointMeta {
  readonly step: number;
  readonly loss?: number;
  /** The rollback generation of the state; the platform refuses an older one. */
  readonly generation?: number;
}

/** A checkpoint's held-out evaluation, as `POST …/checkpoints/{id}/evaluation` takes it. */
export interface CheckpointEvaluationBody {
  readonly metric: HeldOutMetric;
  readonly value: number;
  /** Mean loss over the predictions scored. */
  readonly loss: number;
  /** Predictions scored (test rows, or masked tokens). */
  readonly samples: number;
}

/** What the platform recorded of a posted step. */
export interface MetricsIngested {
  readonly unknownPeers: number;
  /** False when the step was already recorded in the run's current timeline (rows never change). */
  readonly stored: boolean;
  readonly timeline: number;
  /** The highest step recorded in the current timeline, or null. */
  readonly lastStep: number | null;
}

/** The swarm as the aux sees it, posted every few seconds (the platform's `SwarmStatusReport`). */
export interface SwarmStatusBody {
  /** Trainers with fresh progress records. */
  readonly alivePeers: number;
  readonly samplesPerSecond: number;
  readonly step: number;
  readonly time: number;
  /**
   * The trainers the swarm accepts now, with whether each averages (absent: too new to tell) and,
   * while its volunteer's rules hold it, why.
   */
  readonly trainers: ReadonlyArray<{
    readonly peerId: string;
    readonly averaging?: boolean;
    readonly paused?: readonly PauseReason[];
  }>;
  /** Nodes whose pass this aux refused lately: code, reason and when (this aux's clock). */
  readonly refused: ReadonlyArray<{
    readonly peerId: string;
    readonly code: string;
    readonly reason: string;
    readonly at: number;
  }>;
  /** Trainers whose progress records this aux refused as implausible lately: why, how many, when. */
  readonly implausible: ReadonlyArray<{
    readonly peerId: string;
    readonly reason: string;
    readonly count: number;
    readonly at: number;
  }>;
  /** The swarm's split while the aux sees one, else null. */
  readonly split: SplitReport | null;
}

/** A trainer whose contributions hurt, as `POST …/validator-flags` takes it: the validator's flag. */
export type ValidatorFlagBody = ContributionFlag;

// Unknown extra fields are ignored, so a newer platform stays compatible.
const count = z.number().int().nonnegative();
const okSchema = z.object({ ok: z.literal(true) });
const metricsIngestedSchema = z.object({
  ok: z.literal(true),
  unknownPeers: count,
  stored: z.boolean(),
  timeline: count,
  lastStep: count.nullable(),
});
const timelineSchema = z.object({ timeline: count, forked: z.boolean(), lastStep: count.nullable() });
/** The checkpoint as the platform recorded its evaluation; only that it was recorded matters here. */
const evaluatedCheckpointSchema = z.object({
  id: z.string().min(1).max(256),
  evaluation: z.object({ metric: z.string().max(32) }),
});
/** The flag as the platform recorded it; only that it was recorded matters here. */
const validatorFlagRecordedSchema = z.object({ peerId: z.string().min(1).max(256) });
const checkpointSchema = z.object({
  id: z.string().min(1).max(256),
  step: count,
  loss: z.number().nullable(),
  sizeBytes: count,
  sha256: z.string().regex(/^[0-9a-f]{64}$/),
  createdAt: z.string().max(64),
  downloadUrl: z.string().min(1).max(2048),
});

export class AuxPlatformClient {
  /** The node's client, for the calls every node makes (run control, checkpoints). */
  readonly platform: PlatformClient;

  /** `options`: the node session's client, or what to build one from. */
  constructor(options: AuxPlatformClientOptions | PlatformClient) {
    this.platform = options instanceof PlatformClient ? options : new PlatformClient(options);
  }

  /** Tells the platform where other peers can dial this node; each multiaddr ends with /p2p/<its PeerId>. */
  async registerAddress(multiaddrs: readonly string[], signal?: AbortSignal): Promise<void> {
    await this.platform.signed("POST", "peers/address", {
      body: jsonBody({ multiaddrs }),
      schema: okSchema,
      signal,
    });
  }

  /**
   * Posts one aggregated step. The platform records a step of the current timeline once and never
   * changes it; `stored` says whether this post was the one recorded.
   */
  async postMetrics(report: MetricsReportBody, signal?: AbortSignal): Promise<MetricsIngested> {
    const answer = await this.platform.signed("POST", "metrics", {
      body: jsonBody(report),
      schema: metricsIngestedSchema,
      signal,
    });
    return {
      unknownPeers: answer.unknownPeers,
      stored: answer.stored,
      timeline: answer.timeline,
      lastStep: answer.lastStep,
    };
  }

  /** The swarm's liveness: how many trainers are alive now (0 when nobody trains). */
  async postSwarmStatus(status: SwarmStatusBody, signal?: AbortSignal): Promise<void> {
    await this.platform.signed("POST", "swarm-status", { body: jsonBody(status), schema: okSchema, signal });
  }

  /**
   * Tells the platform the swarm restarted from the state of `fromStep`: when steps after it were
   * already recorded, the run's curve continues on a new timeline and the lost steps stay visible.
   */
  async reportResume(
    fromStep: number,
    signal?: AbortSignal,
  ): Promise<{ timeline: number; forked: boolean; lastStep: number | null }> {
    return this.platform.signed("POST", "timelines", {
      body: jsonBody({ fromStep, reason: "resumed" }),
      schema: timelineSchema,
      signal,
    });
  }

  /**
   * Tells the organizer that a trainer's contributions hurt the held-out loss (the platform keeps
   * the latest evidence per peer and lists it on the manage page). NOT_FOUND when no trainer of the
   * experiment has that PeerId.
   */
  async postValidatorFlag(flag: ValidatorFlagBody, signal?: AbortSignal): Promise<void> {
    await this.platform.signed("POST", "validator-flags", {
      body: jsonBody(flag),
      schema: validatorFlagRecordedSchema,
      signal,
    });
  }

  /**
   * Records the held-out evaluation of checkpoint `checkpointId` (one this aux uploaded). The
   * platform keeps the first evaluation of a checkpoint and refuses another (CONFLICT), and refuses
   * a metric other than the one the experiment's model is judged by (INVALID_INPUT).
   */
  async postEvaluation(
    checkpointId: string,
    evaluation: CheckpointEvaluationBody,
    signal?: AbortSignal,
  ): Promise<void> {
    await this.platform.signed("POST", `checkpoints/${encodeURIComponent(checkpointId)}/evaluation`, {
      body: jsonBody(evaluation),
      schema: evaluatedCheckpointSchema,
      signal,
    });
  }

  /**
   * Streams the file at `file.path` to the platform. `sizeBytes` and `sha256` must describe the
   * file: the platform keeps it only if it has exactly that size and hash (SIZE_MISMATCH,
   * CHECKSUM_MISMATCH otherwise). The file's size is checked before anything is sent.
   */
  async uploadCheckpoint(
    file: CheckpointFile,
    meta: CheckpointMeta,
    signal?: AbortSignal,
  ): Promise<UploadedCheckpoint> {
    if (!Number.isSafeInteger(meta.step) || meta.step < 0) {
      throw new RangeError(`step must be a non-negative integer, not ${meta.step}`);
    }
    if (meta.loss !== undefined && !Number.isFinite(meta.loss)) {
      throw new RangeError(`loss must be a finite number, not ${meta.loss}`);
    }
    if (!Number.isSafeInteger(file.sizeBytes) || file.sizeBytes < 1) {
      throw new RangeError(`sizeBytes must be a positive integer, not ${file.sizeBytes}`);
    }
    const query = new URLSearchParams({ step: String(meta.step) });
    if (meta.loss !== undefined) query.set("loss", String(meta.loss));
    query.set("sizeBytes", String(file.sizeBytes));
    if (meta.generation !== undefined) query.set("generation", String(meta.generation));
    const stored = await this.platform.signed("POST", "checkpoints", {
      query,
      body: { kind: "file", file: uploadFileAt(file.path, file.sizeBytes, file.sha256) },
      schema: checkpointSchema,
      signal,
    });
    const sha256 = Buffer.from(file.sha256).toString("hex");
    if (stored.sha256 !== sha256 || stored.sizeBytes !== file.sizeBytes || stored.step !== meta.step) {
      throw new PlatformRequestError(
        PlatformClientErrorCode.BAD_RESPONSE,
        `the platform recorded another checkpoint than the one sent (step ${stored.step}, ` +
          `${stored.sizeBytes} bytes, sha256 ${stored.sha256})`,
        { status: 201 },
      );
    }
    return stored;
  }
}
