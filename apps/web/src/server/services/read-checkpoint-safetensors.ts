import { open } from "node:fs/promises";
import { elementCount, modelTensors, parseExperimentConfig, safetensorsHeader } from "@barnraise/protocol";
import { AppError, AppErrorCode } from "../app-error.ts";
import type { AppContext } from "../context.ts";
import { findCheckpointFile } from "./read-checkpoint-file.ts";

/** The most a stored state blob's header may take (it is a few hundred bytes of CBOR). */
const MAX_BLOB_HEADER_BYTES = 1 << 20;

/** A checkpoint's weights as safetensors: a header built here, then a slice of the stored file. */
export interface SafetensorsExport {
  readonly path: string;
  readonly prefix: Uint8Array;
  /** Bytes `start…end` (inclusive) of the stored file: the float32 parameters. */
  readonly start: number;
  readonly end: number;
  readonly filename: string;
  readonly etag: string;
}

/**
 * The model weights of a checkpoint as a safetensors file: one named float32 tensor per parameter
 * tensor of the experiment's model (`modelTensors`), with the run, step and model config in
 * `__metadata__`. The optimizer state stays out: it is for resuming, in the Barnraise blob.
 *
 * The stored blob (see the swarm's state-snapshot format) is a u32 little-endian header length, the
 * CBOR header, then the float32 parameters and after them the optimizer slots, each as long as the
 * parameters. The parameters are streamed straight from it; the platform checks that the payload
 * is exactly the model's parameters plus whole slots (0 to 3) before serving, so a checkpoint that
 * does not hold this model (or is not a state blob) is refused with CONFLICT rather than mislabelled.
 */
export async function readCheckpointSafetensors(
  ctx: AppContext,
  experimentId: string,
  checkpointId: string,
): Promise<SafetensorsExport> {
  const { row: checkpoint, stored: file } = await findCheckpointFile(ctx, experimentId, checkpointId);
  const experiment = await ctx.db.experiment.findUniqueOrThrow({
    where: { id: experimentId },
    select: { config: true },
  });
  const config = parseExperimentConfig(JSON.parse(experiment.config));
  const tensors = modelTensors(config.model);
  const parameterBytes = tensors.reduce((sum, tensor) => sum + elementCount(tensor.shape), 0) * 4;
  const payloadStart = 4 + (await blobHeaderLength(file.path));
  const payload = file.size - payloadStart;
  const slots = payload / parameterBytes;
  if (payloadStart > file.size || !Number.isInteger(slots) || slots < 1 || slots > 4) {
    throw new AppError(
      AppErrorCode.CONFLICT,
      `checkpoint ${checkpointId} does not hold the parameters of this experiment's ${config.model.preset} model ` +
        `(${parameterBytes} bytes of float32 and its optimizer state)`,
    );
  }
  const header = safetensorsHeader(tensors, {
    barnraise_experiment: experimentId,
    barnraise_step: String(checkpoint.step),
    barnraise_checkpoint_sha256: checkpoint.sha256,
    barnraise_model: JSON.stringify(config.model),
  });
  return {
    path: file.path,
    prefix: header.bytes,
    start: payloadStart,
    end: payloadStart + header.dataBytes - 1,
    filename: `${experimentId}-step-${checkpoint.step}.safetensors`,
    // The export of one immutable checkpoint under one config never changes.
    etag: `${checkpoint.sha256}-safetensors`,
  };
}

async function blobHeaderLength(path: string): Promise<number> {
  const handle = await open(path, "r");
  try {
    const { bytesRead, buffer } = await handle.read(new Uint8Array(4), 0, 4, 0);
    const length = bytesRead === 4 ? new DataView(buffer.buffer).getUint32(0, true) : Number.NaN;
    if (!(length > 0 && length <= MAX_BLOB_HEADER_BYTES)) {
      throw new AppError(AppErrorCode.CONFLICT, "the checkpoint file is not a Barnraise state blob");
    }
    return length;
  } finally {
    await handle.close();
  }
}
