import { SwarmError, SwarmErrorCode } from "../errors.ts";
import type { CodecName, Compressor } from "./compressor.ts";

/**
 * The byte layout every codec shares, so a receiver decodes without knowing the sender's choice:
 *
 *   offset 0  uint8   WIRE_VERSION (magic and format version in one byte)
 *   offset 1  uint8   codec id (CODEC_IDS)
 *   offset 2  uint32  element count, little-endian
 *   offset 6  …       codec parameters, then the payload (all multi-byte numbers little-endian)
 *
 * Every decoder checks that the bytes have exactly the size its parameters imply, so truncated
 * input and trailing bytes are both refused.
 */
export const WIRE_VERSION = 0xb1;

/** Size of the common header (version, codec id, element count). */
export const HEADER_BYTES = 6;

/** Largest element count the uint32 field can carry. */
export const MAX_ELEMENTS = 0xffff_ffff;

/** The codec id byte of each codec. Never renumber: peers of different versions must agree. */
export const CODEC_IDS: Readonly<Record<CodecName, number>> = Object.freeze({
  none: 0,
  fp16: 1,
  uniform8: 2,
  quantile8: 3,
  blockwise8: 4,
  topk: 5,
  sparse: 6,
  "topk-mean": 7,
});

/** True when this machine stores typed-array elements little-endian (every mainstream platform). */
export const NATIVE_LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** The part of a codec the decode dispatcher calls: it gets the bytes after the common header. */
export interface CodecDecoder {
  readonly name: CodecName;
  /**
   * Decodes `count` elements from `body` (parameters then payload). Throws MALFORMED_MESSAGE when
   * `body` is not exactly the size the parameters imply or a parameter is invalid.
   */
  decode(body: Uint8Array, count: number): Float32Array;
}

/** A concrete codec: the `Compressor` that encodes and the decoder the dispatcher calls. */
export type Codec = Compressor & CodecDecoder;

/**
 * `estimateRatio` from a codec's exact encoded size. A vector of 0 elements is counted as one
 * element, so the ratio stays finite (it is then the header's cost per float).
 */
export function ratioOf(encodedBytes: number, length: number): number {
  return encodedBytes / (4 * Math.max(length, 1));
}

/** A new encoded buffer of `HEADER_BYTES + bodyBytes` with the header already written. */
export function allocateEncoded(name: CodecName, count: number, bodyBytes: number): Uint8Array {
  if (count > MAX_ELEMENTS) {
    throw new SwarmError(
      SwarmErrorCode.OVERSIZED_MESSAGE,
      `${name} cannot encode ${count} elements, the wire format's limit is ${MAX_ELEMENTS}`,
    );
  }
  const out = new Uint8Array(HEADER_BYTES + bodyBytes);
  out[0] = WIRE_VERSION;
  out[1] = CODEC_IDS[name];
  new DataView(out.buffer).setUint32(2, count, true);
  return out;
}

/** A DataView over exactly the bytes of `bytes`, whatever its offset in its buffer. */
export function viewOf(bytes: Uint8Array): DataView {
  return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** A MALFORMED_MESSAGE error about an encoded vector. */
export function malformed(message: string): SwarmError {
  return new SwarmError(SwarmErrorCode.MALFORMED_MESSAGE, `compressed vector: ${message}`);
}

/** Refuses a body whose size is not the one its codec's parameters imply. */
export function expectBodySize(name: CodecName, body: Uint8Array, expected: number): void {
  if (body.length < expected) {
    throw malformed(`${name} body is truncated: ${body.length} bytes, expected ${expected}`);
  }
  if (body.length > expected) {
    throw malformed(`${name} body has ${body.length - expected} trailing bytes`);
  }
}

/**
 * The error an 8-bit codec throws for a NaN or infinite input: it has no code for them, and a
 * scale or codebook derived from them would poison every peer's average.
 */
export function nonFiniteInput(name: CodecName, index: number, value: number): SwarmError {
  return new SwarmError(
    SwarmErrorCode.MALFORMED_MESSAGE,
    `${name} cannot encode the non-finite value ${value} at index ${index}`,
  );
}

/**
 * Reads the common header, checks it, and hands the rest to the codec named by its id. Refuses
 * with MALFORMED_MESSAGE (short or unknown header, bad body) or LENGTH_MISMATCH (element count is
 * not `expectedLength`, checked before anything is allocated).
 */
export function decodeWire(
  bytes: Uint8Array,
  expectedLength: number,
  decoders: readonly CodecDecoder[],
): Float32Array {
  if (!Number.isSafeInteger(expectedLength) || expectedLength < 0 || expectedLength > MAX_ELEMENTS) {
    throw new SwarmError(
      SwarmErrorCode.LENGTH_MISMATCH,
      `expected length ${expectedLength} is not an element count the wire format can carry`,
    );
  }
  if (bytes.length < HEADER_BYTES) {
    throw malformed(`${bytes.length} bytes is shorter than the ${HEADER_BYTES}-byte header`);
  }
  if (bytes[0] !== WIRE_VERSION) {
    throw malformed(`unknown format byte 0x${(bytes[0] ?? 0).toString(16)}`);
  }
  const id = bytes[1] ?? -1;
  const decoder = decoders.find((candidate) => CODEC_IDS[candidate.name] === id);
  if (decoder === undefined) throw malformed(`unknown codec id ${id}`);
  const count = viewOf(bytes).getUint32(2, true);
  if (count !== expectedLength) {
    throw new SwarmError(
      SwarmErrorCode.LENGTH_MISMATCH,
      `compressed vector has ${count} elements, expected ${expectedLength}`,
    );
  }
  return decoder.decode(bytes.subarray(HEADER_BYTES), count);
}
