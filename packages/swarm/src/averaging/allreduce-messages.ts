import { z } from "zod";
import { SwarmError, SwarmErrorCode } from "../errors.ts";
import { defineMethod } from "../rpc/rpc.ts";
import { MAX_CHUNK_ELEMENTS, type RoundPlan } from "./partition.ts";

/**
 * The all-reduce wire format. A sender opens one "allreduce" exchange per remote reducer; the
 * request head says who it is and which part it sends, the response head how many chunks follow.
 * Then, on the same stream:
 *
 * - sender → reducer, one frame per chunk: `u32 LE chunk index` + the chunk compressed on its own;
 * - reducer → sender, one frame per chunk: `u32 LE chunk index`, `f64 LE total weight` (Σ w_i of
 *   the senders averaged into this chunk), a bitmap of those senders' member indices
 *   (`ceil(members / 8)` bytes, bit i of byte i>>3, LSB first), then the averaged chunk compressed
 *   once by the reducer (every receiver gets the same bytes).
 *
 * A weight-0 participant sends no chunk frames, only takes the result. Each side closes its
 * writing end after its last frame.
 *
 * A reducer that excludes a sender for what it saw on the sender's stream says why before it
 * closes its end: a refusal frame, `u32 LE 0xFFFFFFFF` (never a chunk index) and one byte, the
 * reason's index in REFUSAL_REASONS. A libp2p stream reset carries no message, so without it the
 * sender could not tell "refused" (the reducer is alive and its round goes on) from "unreachable".
 */

/** Largest group the wire format accepts. */
export const MAX_GROUP_SIZE = 1024;
/** Largest chunk frame any member may send (chunkSizeBytes is capped at 64 MiB by the config). */
export const MAX_ALLREDUCE_FRAME_BYTES = (64 << 20) + (64 << 10);
/**
 * Bytes a codec may add to a chunk beyond its raw float32 size (headers, quantile codebook). The
 * rule every codec keeps: n elements encode in at most 4n + CODEC_SLACK_BYTES bytes, so with chunks
 * of at most MAX_CHUNK_ELEMENTS the frame limit above holds. The sparse codecs keep it with room to
 * spare, their per-block headers and levels included: topk at any density takes at most
 * 3L/8 + 13 bytes per block of L ≤ 4,096 elements, and sparse (a topk round's results) at most
 * 17L/8 + 4, when every element is nonzero; a topk-mean result goes only where it is smaller than
 * the sparse one. test/compression/topk.test.ts checks each codec.
 */
const CODEC_SLACK_BYTES = 4096;
const CHUNK_HEADER_BYTES = 4;
const RESULT_FIXED_HEADER_BYTES = 12;
const REFUSAL_MARK = 0xff_ff_ff_ff;
const REFUSAL_FRAME_BYTES = 5;

/**
 * Why a sender was left out of a round: it sent a non-finite value, did not deliver in time, sent
 * something malformed, declared a weight its progress records did not earn (see
 * `ReducerSessionOptions.earnedWeight`), or its stream failed otherwise.
 */
export type ExclusionReason = "non-finite" | "timeout" | "malformed" | "unearned" | "failed";

/** The exclusions a reducer tells the sender of (the wire order: do not reorder, only append). */
export const REFUSAL_REASONS = [
  "non-finite",
  "malformed",
  "timeout",
  "unearned",
] as const satisfies readonly ExclusionReason[];
export type RefusalReason = (typeof REFUSAL_REASONS)[number];

export function isRefusalReason(reason: ExclusionReason): reason is RefusalReason {
  return (REFUSAL_REASONS as readonly string[]).includes(reason);
}

const index = z
  .number()
  .int()
  .min(0)
  .max(MAX_GROUP_SIZE - 1);

export const allReduceRequestSchema = z.strictObject({
  groupId: z.string().min(1).max(256),
  /** The sender's index in `group.members`; must be the authenticated caller. */
  senderIndex: index,
  /** The part the sender streams: always the receiving reducer's index. */
  partIndex: index,
  /** The sender's weight (samples); 0 for a participant that only takes the result. */
  weight: z.number().min(0).max(1e15),
  /** Elements in the part, so both sides agree on the partition. */
  partLength: z
    .number()
    .int()
    .min(1)
    .max(2 ** 31),
  /** Elements per chunk, so both sides agree on the chunking. */
  chunkElements: z.number().int().min(1).max(MAX_CHUNK_ELEMENTS),
});
export type AllReduceRequest = z.infer<typeof allReduceRequestSchema>;

export const allReduceResponseSchema = z.strictObject({
  chunkCount: z
    .number()
    .int()
    .min(1)
    .max(2 ** 31),
});
export type AllReduceResponse = z.infer<typeof allReduceResponseSchema>;

/** The one rpc method of the butterfly all-reduce. */
export const allReduceMethod = defineMethod({
  name: "allreduce",
  request: allReduceRequestSchema,
  response: allReduceResponseSchema,
  maxFrameBytes: MAX_ALLREDUCE_FRAME_BYTES,
  // A round opens a stream to every reducer at once, and on a slow uplink a request can queue for
  // many seconds behind the chunks already streaming on the other streams (C at 1 Mbit/s: > 10 s).
  requestTimeoutMs: 60_000,
});

/** Checks a validated head against the local plan; throws what the caller is sent back. */
export function checkRequest(
  plan: RoundPlan,
  chunkElements: number,
  head: AllReduceRequest,
  fromPeerId: string,
): void {
  const { members } = plan.group;
  const malformed = (message: string) =>
    new SwarmError(SwarmErrorCode.MALFORMED_MESSAGE, `all-reduce request from ${fromPeerId}: ${message}`, {
      peer: fromPeerId,
    });
  if (!members.some((member) => member.peerId === fromPeerId)) {
    throw new SwarmError(
      SwarmErrorCode.UNAUTHORIZED_PEER,
      `${fromPeerId} is not a member of group ${plan.group.groupId}`,
      {
        peer: fromPeerId,
      },
    );
  }
  if (members[head.senderIndex]?.peerId !== fromPeerId) {
    throw new SwarmError(
      SwarmErrorCode.UNAUTHORIZED_PEER,
      `${fromPeerId} claims to be member ${head.senderIndex}`,
      {
        peer: fromPeerId,
      },
    );
  }
  if (head.groupId !== plan.group.groupId) {
    throw malformed(`group ${head.groupId} is not ${plan.group.groupId}`);
  }
  if (!plan.participants.has(head.senderIndex)) throw malformed("an aux member sends no vector");
  if (head.partIndex !== plan.selfIndex) {
    throw malformed(`part ${head.partIndex} is not reduced here (part ${plan.selfIndex} is)`);
  }
  const part = plan.parts[plan.selfIndex];
  const partLength = part === undefined ? 0 : part.end - part.start;
  if (partLength === 0) throw malformed("this member reduces no part");
  if (head.partLength !== partLength) {
    throw malformed(`part has ${partLength} elements, not ${head.partLength}`);
  }
  if (head.chunkElements !== chunkElements) {
    throw malformed(`chunks have ${chunkElements} elements, not ${head.chunkElements}`);
  }
  if (head.weight !== members[head.senderIndex]?.weight) {
    throw malformed(
      `weight ${head.weight} disagrees with the group's weight ${members[head.senderIndex]?.weight}`,
    );
  }
}

/** Largest acceptable compressed payload for a chunk of `elements` values. */
export function maxChunkPayloadBytes(elements: number): number {
  return elements * Float32Array.BYTES_PER_ELEMENT + CODEC_SLACK_BYTES;
}

export function encodeChunkFrame(chunkIndex: number, payload: Uint8Array): Uint8Array {
  const frame = new Uint8Array(CHUNK_HEADER_BYTES + payload.length);
  new DataView(frame.buffer).setUint32(0, chunkIndex, true);
  frame.set(payload, CHUNK_HEADER_BYTES);
  return frame;
}

/** Splits a sender's chunk frame; refuses a wrong index or an oversized payload. */
export function decodeChunkFrame(frame: Uint8Array, expectedIndex: number, elements: number): Uint8Array {
  if (frame.length < CHUNK_HEADER_BYTES) {
    throw malformedFrame(`chunk frame of ${frame.length} bytes has no header`);
  }
  const chunkIndex = view(frame).getUint32(0, true);
  if (chunkIndex !== expectedIndex) {
    throw malformedFrame(`chunk ${chunkIndex} arrived, chunk ${expectedIndex} was expected`);
  }
  return payloadWithin(frame, CHUNK_HEADER_BYTES, elements);
}

/** A reducer's averaged chunk, as decoded from a result frame. */
export interface ResultFrame {
  totalWeight: number;
  /** Member-index bitmap of the senders averaged into this chunk. */
  contributors: Uint8Array;
  payload: Uint8Array;
}

export function bitmapBytes(memberCount: number): number {
  return Math.ceil(memberCount / 8);
}

export function encodeResultFrame(chunkIndex: number, result: ResultFrame): Uint8Array {
  const bitmapAt = RESULT_FIXED_HEADER_BYTES;
  const payloadAt = bitmapAt + result.contributors.length;
  const frame = new Uint8Array(payloadAt + result.payload.length);
  const header = view(frame);
  header.setUint32(0, chunkIndex, true);
  header.setFloat64(4, result.totalWeight, true);
  frame.set(result.contributors, bitmapAt);
  frame.set(result.payload, payloadAt);
  return frame;
}

/** Splits a reducer's result frame; refuses a wrong index, a bad weight or an oversized payload. */
export function decodeResultFrame(
  frame: Uint8Array,
  expectedIndex: number,
  elements: number,
  memberCount: number,
): ResultFrame {
  const payloadAt = RESULT_FIXED_HEADER_BYTES + bitmapBytes(memberCount);
  if (frame.length < payloadAt) throw malformedFrame(`result frame of ${frame.length} bytes has no header`);
  const header = view(frame);
  const chunkIndex = header.getUint32(0, true);
  if (chunkIndex !== expectedIndex) {
    throw malformedFrame(`result ${chunkIndex} arrived, result ${expectedIndex} was expected`);
  }
  const totalWeight = header.getFloat64(4, true);
  if (!Number.isFinite(totalWeight) || totalWeight <= 0) {
    throw malformedFrame(`result has total weight ${totalWeight}`);
  }
  return {
    totalWeight,
    contributors: frame.subarray(RESULT_FIXED_HEADER_BYTES, payloadAt),
    payload: payloadWithin(frame, payloadAt, elements),
  };
}

export function encodeRefusalFrame(reason: RefusalReason): Uint8Array {
  const frame = new Uint8Array(REFUSAL_FRAME_BYTES);
  view(frame).setUint32(0, REFUSAL_MARK, true);
  frame[4] = REFUSAL_REASONS.indexOf(reason);
  return frame;
}

/**
 * The reason of a reducer's refusal frame, or undefined when `frame` is not one (a result frame);
 * refuses a refusal frame of the wrong size or with an unknown reason.
 */
export function refusalOf(frame: Uint8Array): RefusalReason | undefined {
  if (frame.length < 4 || view(frame).getUint32(0, true) !== REFUSAL_MARK) return undefined;
  const reason = frame.length === REFUSAL_FRAME_BYTES ? REFUSAL_REASONS[frame[4] ?? -1] : undefined;
  if (reason === undefined) {
    throw malformedFrame(`refusal frame of ${frame.length} bytes with reason ${String(frame[4])}`);
  }
  return reason;
}

/** Throws MALFORMED_MESSAGE at the first non-finite value. */
export function assertFinite(values: Float32Array, what: string): void {
  for (let i = 0; i < values.length; i++) {
    if (!Number.isFinite(values[i])) throw malformedFrame(`${what} has a non-finite value at element ${i}`);
  }
}

function payloadWithin(frame: Uint8Array, at: number, elements: number): Uint8Array {
  const payload = frame.subarray(at);
  const limit = maxChunkPayloadBytes(elements);
  if (payload.length > limit) {
    throw new SwarmError(
      SwarmErrorCode.OVERSIZED_MESSAGE,
      `chunk payload of ${payload.length} bytes exceeds ${limit} for ${elements} elements`,
    );
  }
  return payload;
}

function view(frame: Uint8Array): DataView {
  return new DataView(frame.buffer, frame.byteOffset, frame.byteLength);
}

function malformedFrame(message: string): SwarmError {
  return new SwarmError(SwarmErrorCode.MALFORMED_MESSAGE, message);
}
