import {
  elementCount,
  UPLOADED_MODEL,
  layersModelTensors,
  modelTensors,
  safetensorsHeader,
  type ModelConfig,
  type ModelTensor,
} from "@barnraise/protocol";
import { AppError, AppErrorCode } from "../app-error.ts";
import type { AppContext } from "../context.ts";
import { readStoredModel, type StoredModel } from "../models/model-store.ts";
import { readObjectBytes, type ObjectStore } from "../storage/object-store.ts";
import { findCheckpointFile } from "./read-checkpoint-file.ts";
import { storedConfigOf } from "../stored-config.ts";

/** The most a stored state blob's header may take (it is a few hundred bytes of CBOR). */
const MAX_BLOB_HEADER_BYTES = 1 << 20;

/** A checkpoint's weights as safetensors: a header built here, then a slice of the stored file. */
export interface SafetensorsExport {
  /** The stored checkpoint's object key. */
  readonly key: string;
  readonly prefix: Uint8Array;
  /** Bytes `start…end` (inclusive) of the stored file: the float32 parameters. */
  readonly start: number;
  readonly end: number;
  readonly filename: string;
  readonly etag: string;
}

/**
 * Where a checkpoint's model parameters lie in its stored file, and what they are: the flat float32
 * vector every peer averages, `tensors` in order, bytes `start…start + parameterBytes − 1` of the
 * object `key`.
 */
export interface CheckpointParameters {
  readonly checkpoint: { readonly step: number; readonly sha256: string };
  readonly model: ModelConfig;
  /** The uploaded model, for an experiment that trains one (`model.kind` "uploaded"). */
  readonly stored: StoredModel | null;
  /** The named tensors of the flat vector, in order. */
  readonly tensors: readonly ModelTensor[];
  /** The stored checkpoint's object key. */
  readonly key: string;
  /** Offset of the first parameter byte in it. */
  readonly start: number;
  readonly parameterBytes: number;
}

/**
 * Finds a checkpoint of an experiment and checks that it holds the experiment's model. The stored
 * blob (see the swarm's state-snapshot format) is a u32 little-endian header length, the CBOR
 * header, then the float32 parameters and after them the optimizer slots, each as long as the
 * parameters. The payload must be exactly the model's parameters plus whole slots (0 to 3), so a
 * checkpoint that does not hold this model (or is not a state blob) is refused with CONFLICT rather
 * than mislabelled. The tensors are the preset's (`modelTensors`) or, for an uploaded model, its
 * trainable weights (`layersModelTensors`); frozen weights are not in checkpoints.
 *
 * NOT_FOUND for an unknown checkpoint (or one of another experiment), a file gone from the store,
 * or an uploaded model gone from the model store. `accept` may refuse the model before the file is
 * read (an export the model has no form in).
 */
export async function readCheckpointParameters(
  ctx: AppContext,
  experimentId: string,
  checkpointId: string,
  accept: (model: ModelConfig) => void = () => {},
): Promise<CheckpointParameters> {
  const { row: checkpoint, stored: file } = await findCheckpointFile(ctx, experimentId, checkpointId);
  const experiment = await ctx.db.experiment.findUniqueOrThrow({
    where: { id: experimentId },
    select: { config: true },
  });
  const { model } = storedConfigOf(experiment);
  accept(model);
  let stored: StoredModel | null = null;
  let tensors: ModelTensor[];
  if (model.kind === UPLOADED_MODEL) {
    stored = await readStoredModel(ctx.storage, model.sha256);
    tensors = layersModelTensors(stored.model);
  } else {
    tensors = modelTensors(model);
  }
  const parameterBytes = tensors.reduce((sum, tensor) => sum + elementCount(tensor.shape), 0) * 4;
  const start = 4 + (await blobHeaderLength(ctx.storage, file.key, file.size));
  const slots = (file.size - start) / parameterBytes;
  if (start > file.size || !Number.isInteger(slots) || slots < 1 || slots > 4) {
    throw new AppError(
      AppErrorCode.CONFLICT,
      `checkpoint ${checkpointId} does not hold the parameters of this experiment's ${model.kind} model ` +
        `(${parameterBytes} bytes of float32 and its optimizer state)`,
    );
  }
  return {
    checkpoint: { step: checkpoint.step, sha256: checkpoint.sha256 },
    model,
    stored,
    tensors,
    key: file.key,
    start,
    parameterBytes,
  };
}

/**
 * The model weights of a checkpoint as a safetensors file: one named float32 tensor per tensor of
 * the checkpoint's flat parameter vector (`readCheckpointParameters`: a preset's `modelTensors`,
 * or an uploaded model's trainable weights under their TF.js names, e.g. `dense_Dense1/kernel`),
 * with the run, step and model config in `__metadata__`. The optimizer state stays out: it is for
 * resuming, in the Barnraise blob. The parameters are streamed straight from the stored blob.
 */
export async function readCheckpointSafetensors(
  ctx: AppContext,
  experimentId: string,
  checkpointId: string,
): Promise<SafetensorsExport> {
  const { checkpoint, model, tensors, key, start } = await readCheckpointParameters(
    ctx,
    experimentId,
    checkpointId,
  );
  let header: ReturnType<typeof safetensorsHeader>;
  try {
    header = safetensorsHeader(tensors, {
      barnraise_experiment: experimentId,
      barnraise_step: String(checkpoint.step),
      barnraise_checkpoint_sha256: checkpoint.sha256,
      barnraise_model: JSON.stringify(model),
    });
  } catch (error) {
    // An uploaded model may name a weight "__metadata__", which safetensors reserves.
    if (error instanceof RangeError) throw new AppError(AppErrorCode.CONFLICT, error.message);
    throw error;
  }
  return {
    key,
    prefix: header.bytes,
    start,
    end: start + header.dataBytes - 1,
    filename: `${experimentId}-step-${checkpoint.step}.safetensors`,
    // The export of one immutable checkpoint under one config never changes.
    etag: `${checkpoint.sha256}-safetensors`,
  };
}

async function blobHeaderLength(storage: ObjectStore, key: string, size: number): Promise<number> {
  const bytes = size >= 4 ? await readObjectBytes(storage, key, { start: 0, end: 3 }) : new Uint8Array();
  const length =
    bytes.byteLength === 4 ? new DataView(bytes.buffer, bytes.byteOffset).getUint32(0, true) : Number.NaN;
  if (!(length > 0 && length <= MAX_BLOB_HEADER_BYTES)) {
    throw new AppError(AppErrorCode.CONFLICT, "the checkpoint file is not a Barnraise state blob");
  }
  return length;
}
