import { runtimeCrypto } from "@barnraise/protocol/runtime-crypto";
import { z } from "zod";
import { SwarmError, SwarmErrorCode } from "../errors.ts";
import { MAX_HEAD_BYTES, decodeMessage, encodeMessage } from "../rpc/codec.ts";
import type { TrainingState } from "./training-state.ts";

/**
 * The wire form of a `TrainingState` and the immutable, chunk-hashed snapshot a donor serves.
 *
 * Blob layout: a u32 little-endian header length, the CBOR header (version, epoch, optimizer name
 * and step, tensor lengths, slot names; from version 2 also the run's generation, its sample
 * counter and the config version), then the raw little-endian float32 payloads back to back in a
 * fixed order: parameters, then the optimizer slots sorted by name. Version 1 blobs (no generation
 * or samples) still parse, as generation 0 with 0 samples.
 */

const BLOB_VERSION = 2;
/** Bytes of a SHA-256 digest. */
export const HASH_BYTES = 32;
const MAX_SLOTS = 64;
const MAX_TENSOR_FLOATS = 2 ** 31;

const lengthSchema = z.number().int().nonnegative().max(MAX_TENSOR_FLOATS);
const countSchema = z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER);

const headerFields = {
  epoch: countSchema,
  optimizer: z.strictObject({
    name: z.string().min(1).max(64),
    step: countSchema,
  }),
  parameters: lengthSchema,
  slots: z
    .array(z.strictObject({ name: z.string().min(1).max(128), length: lengthSchema }))
    .max(MAX_SLOTS)
    .refine((slots) => slots.every((slot, i) => i === 0 || (slots[i - 1]?.name ?? "") < slot.name), {
      message: "slot names must be unique and sorted",
    }),
};

const headerSchema = z.discriminatedUnion("version", [
  z.strictObject({ version: z.literal(1), ...headerFields }),
  z.strictObject({
    version: z.literal(BLOB_VERSION),
    ...headerFields,
    generation: countSchema,
    samples: z.number().nonnegative().max(Number.MAX_SAFE_INTEGER),
    configVersion: countSchema.optional(),
  }),
]);

type StateHeader = z.infer<typeof headerSchema>;

const LITTLE_ENDIAN_HOST = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** Serializes `state` into one freshly allocated blob; later changes to `state` do not touch it. */
export function serializeTrainingState(state: TrainingState): Uint8Array {
  const slots = Object.entries(state.optimizer.slots).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const tensors = [state.parameters, ...slots.map(([, tensor]) => tensor)];
  const parsed = headerSchema.safeParse({
    version: BLOB_VERSION,
    epoch: state.epoch,
    optimizer: { name: state.optimizer.name, step: state.optimizer.step },
    parameters: state.parameters.length,
    slots: slots.map(([name, tensor]) => ({ name, length: tensor.length })),
    generation: state.generation ?? 0,
    samples: state.samples ?? 0,
    ...(state.configVersion === undefined ? {} : { configVersion: state.configVersion }),
  } satisfies StateHeader);
  if (!parsed.success) {
    const issues = parsed.error.issues
      .slice(0, 5)
      .map((issue) => `${issue.path.map(String).join(".")}: ${issue.message}`);
    throw malformed(`training state cannot be serialized: ${issues.join("; ")}`);
  }
  const header = parsed.data;
  const headerBytes = encodeMessage(header);
  const payloadBytes = tensors.reduce((sum, tensor) => sum + tensor.byteLength, 0);
  const blob = new Uint8Array(4 + headerBytes.length + payloadBytes);
  new DataView(blob.buffer).setUint32(0, headerBytes.length, true);
  blob.set(headerBytes, 4);
  let offset = 4 + headerBytes.length;
  for (const tensor of tensors) {
    writeFloat32LittleEndian(blob, offset, tensor);
    offset += tensor.byteLength;
  }
  return blob;
}

/**
 * Parses a blob made by `serializeTrainingState` (version 1 or 2); anything else is refused with
 * MALFORMED_MESSAGE. The result always has `generation` and `samples` (0 for a version 1 blob).
 */
export function deserializeTrainingState(blob: Uint8Array): TrainingState {
  if (blob.length < 4) throw malformed(`state blob is ${blob.length} bytes, too short for its header length`);
  const headerLength = new DataView(blob.buffer, blob.byteOffset, blob.byteLength).getUint32(0, true);
  if (headerLength > MAX_HEAD_BYTES || 4 + headerLength > blob.length) {
    throw malformed(`state blob header length ${headerLength} does not fit a ${blob.length}-byte blob`);
  }
  const header = decodeMessage(blob.subarray(4, 4 + headerLength), headerSchema, "state blob header");
  const payloadBytes = header.slots.reduce((sum, slot) => sum + slot.length * 4, header.parameters * 4);
  if (4 + headerLength + payloadBytes !== blob.length) {
    throw malformed(
      `state blob holds ${blob.length - 4 - headerLength} payload bytes, its header announces ${payloadBytes}`,
    );
  }
  let offset = 4 + headerLength;
  const next = (length: number): Float32Array => {
    const tensor = readFloat32LittleEndian(blob, offset, length);
    offset += length * 4;
    return tensor;
  };
  const parameters = next(header.parameters);
  // fromEntries defines own properties, so a slot named "__proto__" cannot touch the prototype.
  const slots = Object.fromEntries(header.slots.map((slot) => [slot.name, next(slot.length)]));
  const lineage =
    header.version === 1
      ? { generation: 0, samples: 0 }
      : {
          generation: header.generation,
          samples: header.samples,
          ...(header.configVersion === undefined ? {} : { configVersion: header.configVersion }),
        };
  return {
    epoch: header.epoch,
    parameters,
    optimizer: { name: header.optimizer.name, step: header.optimizer.step, slots },
    ...lineage,
  };
}

/**
 * A serialized state split into fixed-size chunks with the SHA-256 of each chunk and a `root`
 * (SHA-256 over the concatenated chunk hashes). A donor builds one per epoch and serves it
 * unchanged, so an optimizer step taken while serving never tears a download. Treat as read-only.
 */
export interface StateSnapshot {
  readonly epoch: number;
  /** The run generation of the state (0 when the state names none). */
  readonly generation: number;
  /** The run's sample counter of the state (0 when the state names none). */
  readonly samples: number;
  readonly blob: Uint8Array;
  readonly chunkBytes: number;
  readonly chunkHashes: readonly Uint8Array<ArrayBuffer>[];
  readonly root: Uint8Array<ArrayBuffer>;
}

/**
 * Serializes `state` once and hashes it in chunks of `chunkBytes`, grown when needed so that
 * the blob takes at most `maxChunks` chunks.
 */
export function createStateSnapshot(
  state: TrainingState,
  chunkBytes: number,
  maxChunks = Infinity,
): StateSnapshot {
  if (!Number.isSafeInteger(chunkBytes) || chunkBytes <= 0) {
    throw new SwarmError(
      SwarmErrorCode.LENGTH_MISMATCH,
      `chunk size must be a positive integer, got ${chunkBytes}`,
    );
  }
  const blob = serializeTrainingState(state);
  const size = Math.max(chunkBytes, Math.ceil(blob.length / maxChunks));
  const count = chunkCount(blob.length, size);
  const chunkHashes = Array.from({ length: count }, (_, i) =>
    sha256(blob.subarray(i * size, Math.min(blob.length, (i + 1) * size))),
  );
  return Object.freeze({
    epoch: state.epoch,
    generation: state.generation ?? 0,
    samples: state.samples ?? 0,
    blob,
    chunkBytes: size,
    chunkHashes: Object.freeze(chunkHashes),
    root: chunkRoot(chunkHashes),
  });
}

/** The bytes of chunk `index` (a view into the snapshot's blob). */
export function snapshotChunk(snapshot: StateSnapshot, index: number): Uint8Array {
  const start = index * snapshot.chunkBytes;
  return snapshot.blob.subarray(start, Math.min(snapshot.blob.length, start + snapshot.chunkBytes));
}

/** How many chunks of `chunkBytes` cover `totalBytes` (the last one may be shorter). */
export function chunkCount(totalBytes: number, chunkBytes: number): number {
  return Math.ceil(totalBytes / chunkBytes);
}

/** The expected length of chunk `index`. */
export function chunkLength(totalBytes: number, chunkBytes: number, index: number): number {
  return Math.min(chunkBytes, totalBytes - index * chunkBytes);
}

/** SHA-256 of `bytes`, as a plain Uint8Array. */
export function sha256(bytes: Uint8Array): Uint8Array<ArrayBuffer> {
  return Uint8Array.from(runtimeCrypto.sha256(bytes));
}

/** The manifest root: SHA-256 over the concatenated chunk hashes. */
export function chunkRoot(chunkHashes: readonly Uint8Array[]): Uint8Array<ArrayBuffer> {
  const all = new Uint8Array(chunkHashes.reduce((total, chunkHash) => total + chunkHash.length, 0));
  let offset = 0;
  for (const chunkHash of chunkHashes) {
    all.set(chunkHash, offset);
    offset += chunkHash.length;
  }
  return sha256(all);
}

/** Byte-wise equality (for hashes). */
export function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

function writeFloat32LittleEndian(target: Uint8Array, offset: number, tensor: Float32Array): void {
  if (LITTLE_ENDIAN_HOST) {
    target.set(new Uint8Array(tensor.buffer, tensor.byteOffset, tensor.byteLength), offset);
    return;
  }
  const view = new DataView(target.buffer, target.byteOffset + offset, tensor.byteLength);
  tensor.forEach((value, i) => {
    view.setFloat32(i * 4, value, true);
  });
}

function readFloat32LittleEndian(source: Uint8Array, offset: number, length: number): Float32Array {
  const tensor = new Float32Array(length);
  if (LITTLE_ENDIAN_HOST) {
    new Uint8Array(tensor.buffer).set(source.subarray(offset, offset + length * 4));
    return tensor;
  }
  const view = new DataView(source.buffer, source.byteOffset + offset, length * 4);
  for (let i = 0; i < length; i++) tensor[i] = view.getFloat32(i * 4, true);
  return tensor;
}

function malformed(message: string): SwarmError {
  return new SwarmError(SwarmErrorCode.MALFORMED_MESSAGE, message);
}
