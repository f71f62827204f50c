import { createHash, randomUUID } from "node:crypto";
import { equalBytes } from "@barnraise/protocol";
import { isUniqueViolation, type Database } from "@barnraise/prisma";
import { checkpointUploadQuerySchema, type CheckpointUploadQuery } from "../../api/schemas/peer.ts";
import type { CheckpointView } from "../../api/schemas/public.ts";
import { AppError, AppErrorCode } from "../app-error.ts";
import { enqueueAlert } from "../alerts/enqueue-alert.ts";
import type { AppContext } from "../context.ts";
import { parseInput } from "../http/json-body.ts";
import { removeCheckpoint, stageCheckpoint } from "../storage/checkpoint-store.ts";
import type { StagedObject } from "../storage/object-store.ts";
import { toCheckpointView } from "./list-checkpoints.ts";
import { authenticateAux } from "./peer-auth.ts";
import type { ExperimentRecord } from "../records.ts";
import { AlertEventType } from "../../api/schemas/alerts.ts";

/**
 * An aux checkpointer uploads a checkpoint: `POST …/checkpoints?step=&loss=&sizeBytes=&generation=`
 * with the file as the body, streamed. The signed request's body digest is the file's SHA-256, and
 * the query (the checkpoint's metadata) is inside the signed scope. The row records the run's
 * current timeline and config version, and the generation the state was trained in.
 *
 * Refused before a byte is read: a generation older than the run's (STALE_GENERATION: the run was
 * rolled back since) or newer (CONFLICT), a step the current timeline already has a checkpoint of
 * (CONFLICT: steps only move forward), a declared size over BARNRAISE_MAX_CHECKPOINT_BYTES
 * (PAYLOAD_TOO_LARGE), or a Content-Length other than the declared size (SIZE_MISMATCH). The body
 * then streams into the store's staging area while it is hashed and counted; it is refused as soon
 * as it runs past the declared size, and at the end if it is shorter (SIZE_MISMATCH) or hashes to
 * another digest (CHECKSUM_MISMATCH). Only a complete, verified file is committed (made visible
 * whole) and recorded, after the generation and step checks are made again (a rollback
 * or another upload may have happened meanwhile), together with its "checkpoint uploaded" alert; if
 * recording fails, the file is deleted again.
 * Whatever goes wrong, nothing half-written becomes visible.
 */
export async function uploadCheckpoint(
  ctx: AppContext,
  req: Request,
  experimentId: string,
): Promise<CheckpointView> {
  const caller = await authenticateAux(ctx, req, experimentId, "verify-later");
  const query = parseInput(checkpointUploadQuerySchema, Object.fromEntries(new URL(req.url).searchParams));
  const size = query.sizeBytes;
  await checkPlace(ctx, caller.experiment, query);
  if (size > ctx.env.maxCheckpointBytes) {
    throw new AppError(
      AppErrorCode.PAYLOAD_TOO_LARGE,
      `the checkpoint is ${size} bytes; this platform accepts at most ${ctx.env.maxCheckpointBytes}`,
    );
  }
  const contentLength = req.headers.get("content-length");
  if (contentLength !== null && Number(contentLength) !== size) {
    throw new AppError(
      AppErrorCode.SIZE_MISMATCH,
      `Content-Length is ${contentLength} but sizeBytes is ${size}`,
    );
  }
  if (req.body === null) throw new AppError(AppErrorCode.SIZE_MISMATCH, "the upload has no body");

  const storageKey = `${caller.experiment.id}/${randomUUID()}.ckpt`;
  const staged = await stageCheckpoint(ctx.storage, storageKey);
  try {
    const sha256 = await receive(req.body, staged, size);
    if (!equalBytes(sha256, caller.verified.bodySha256)) {
      throw new AppError(
        AppErrorCode.CHECKSUM_MISMATCH,
        "the file does not hash to the SHA-256 in the signed request",
      );
    }
    await staged.commit();
    try {
      const row = await ctx.db.$transaction(async (tx) => {
        const experiment = await tx.experiment.findUniqueOrThrow({ where: { id: caller.experiment.id } });
        await checkPlace(ctx, experiment, query, tx);
        const created = await tx.checkpoint.create({
          data: {
            experimentId: experiment.id,
            step: query.step,
            loss: query.loss ?? null,
            sizeBytes: BigInt(size),
            sha256: Buffer.from(sha256).toString("hex"),
            storageKey,
            uploadedBy: caller.peer.peerId,
            timeline: experiment.timeline,
            generation: query.generation,
            configVersion: experiment.configVersion,
            createdAt: new Date(ctx.now()),
          },
        });
        await enqueueAlert(ctx, tx, experiment, {
          type: AlertEventType.checkpointUploaded,
          summary: `${experiment.name} has a new checkpoint at step ${created.step}`,
          details: {
            checkpointId: created.id,
            step: created.step,
            loss: created.loss,
            sizeBytes: size,
            sha256: created.sha256,
          },
        });
        return created;
      });
      ctx.logger.info(
        {
          experimentId: row.experimentId,
          step: row.step,
          generation: row.generation,
          timeline: row.timeline,
          sizeBytes: size,
          uploadedBy: row.uploadedBy,
        },
        "checkpoint uploaded",
      );
      return toCheckpointView(row, caller.experiment);
    } catch (error) {
      await removeCheckpoint(ctx.storage, storageKey);
      // Two uploads of one step can pass the check at once; the database's unique key keeps one.
      if (isUniqueViolation(error)) throw stepTaken(query.step);
      throw error;
    }
  } finally {
    // After a commit the staged file is already gone; otherwise this drops it.
    await staged.discard();
  }
}

/**
 * Refuses a checkpoint of another generation than the run's, or of a step the current timeline
 * already has a checkpoint of.
 */
async function checkPlace(
  ctx: AppContext,
  experiment: Pick<ExperimentRecord, "id" | "generation" | "timeline">,
  query: CheckpointUploadQuery,
  db: Pick<Database, "checkpoint"> = ctx.db,
): Promise<void> {
  if (query.generation < experiment.generation) {
    throw new AppError(
      AppErrorCode.STALE_GENERATION,
      `the checkpoint is of generation ${query.generation}, but the run was rolled back to generation ${experiment.generation}`,
    );
  }
  if (query.generation > experiment.generation) {
    throw new AppError(
      AppErrorCode.CONFLICT,
      `the run is at generation ${experiment.generation}; it has no generation ${query.generation}`,
    );
  }
  const existing = await db.checkpoint.findFirst({
    where: { experimentId: experiment.id, timeline: experiment.timeline, step: query.step },
    select: { id: true },
  });
  if (existing !== null) throw stepTaken(query.step);
}

function stepTaken(step: number): AppError {
  return new AppError(
    AppErrorCode.CONFLICT,
    `the run already has a checkpoint of step ${step} in its current timeline`,
  );
}

/** Streams `body` into `staged`, refusing it past `size` bytes or short of it; returns its SHA-256. */
async function receive(
  body: ReadableStream<Uint8Array>,
  staged: StagedObject,
  size: number,
): Promise<Uint8Array> {
  const hash = createHash("sha256");
  const reader = body.getReader();
  let received = 0;
  for (;;) {
    let next: ReadableStreamReadResult<Uint8Array>;
    try {
      next = await reader.read();
    } catch {
      throw new AppError(
        AppErrorCode.SIZE_MISMATCH,
        `the upload was interrupted after ${received} of ${size} bytes`,
      );
    }
    if (next.done) break;
    received += next.value.byteLength;
    if (received > size) {
      await reader.cancel().catch(() => undefined);
      throw new AppError(AppErrorCode.SIZE_MISMATCH, `the body is longer than sizeBytes (${size})`);
    }
    hash.update(next.value);
    await staged.write(next.value);
  }
  if (received !== size) {
    throw new AppError(AppErrorCode.SIZE_MISMATCH, `the body ended after ${received} of ${size} bytes`);
  }
  return new Uint8Array(hash.digest());
}
