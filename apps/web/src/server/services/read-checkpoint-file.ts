import type { ServedObject } from "../http/byte-range.ts";
import { findCheckpoint } from "../storage/checkpoint-store.ts";
import type { ObjectInfo } from "../storage/object-store.ts";
import { AppError, AppErrorCode } from "../app-error.ts";
import type { AppContext } from "../context.ts";

/**
 * A checkpoint's row and its stored file: NOT_FOUND for an unknown id (or one of another
 * experiment), or a file that is gone from the store.
 */
export async function findCheckpointFile(
  ctx: AppContext,
  experimentId: string,
  checkpointId: string,
): Promise<{ row: { step: number; sha256: string; storageKey: string }; stored: ObjectInfo }> {
  const row = await ctx.db.checkpoint.findUnique({ where: { id: checkpointId } });
  if (row?.experimentId !== experimentId) {
    throw new AppError(
      AppErrorCode.NOT_FOUND,
      `experiment ${experimentId} has no checkpoint ${checkpointId}`,
    );
  }
  const stored = await findCheckpoint(ctx.storage, row.storageKey);
  if (stored === null) {
    ctx.logger.error(
      { checkpointId, storageKey: row.storageKey },
      "checkpoint file is missing from the store",
    );
    throw new AppError(AppErrorCode.NOT_FOUND, `the file of checkpoint ${checkpointId} is not available`);
  }
  return { row, stored };
}

/** Where a checkpoint's file is, to download it: 404 for an unknown id, or a file that is gone. */
export async function readCheckpointFile(
  ctx: AppContext,
  experimentId: string,
  checkpointId: string,
): Promise<ServedObject> {
  const { row, stored } = await findCheckpointFile(ctx, experimentId, checkpointId);
  return {
    storage: ctx.storage,
    key: stored.key,
    size: stored.size,
    contentType: "application/octet-stream",
    etag: row.sha256,
    filename: `${experimentId}-step-${row.step}.ckpt`,
    // A checkpoint's bytes never change: the URL names one immutable file.
    cacheControl: "public, max-age=31536000, immutable",
  };
}
