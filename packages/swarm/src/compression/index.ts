import type { CompressionMethod } from "@barnraise/protocol";
import { SwarmError, SwarmErrorCode } from "../errors.ts";
import { adaptiveCompressor } from "./adaptive.ts";
import { blockwise8Codec } from "./blockwise8.ts";
import type { CodecName, Compressor } from "./compressor.ts";
import { fp16Codec } from "./fp16.ts";
import { noneCodec } from "./none.ts";
import { quantile8Codec } from "./quantile8.ts";
import { uniform8Codec } from "./uniform8.ts";
import { decodeWire, type Codec } from "./wire.ts";

export type { CodecName, Compressor } from "./compressor.ts";
export { DEFAULT_ADAPTIVE_THRESHOLD } from "./adaptive.ts";

/** A `compression.method` of the experiment config: a codec, or "adaptive". */
export type CompressionMethodName = (typeof CompressionMethod)[keyof typeof CompressionMethod];

const CODECS: readonly Codec[] = [noneCodec, fp16Codec, uniform8Codec, quantile8Codec, blockwise8Codec];

/** Every concrete codec, in wire-id order ("adaptive" is a choice between two of them). */
export const CODEC_NAMES: readonly CodecName[] = Object.freeze(CODECS.map((codec) => codec.name));

/**
 * The compressor for a vector of `length` elements under `method`. Only "adaptive" looks at the
 * length: blockwise8 when `length >= adaptiveThreshold` (default 65,536), fp16 otherwise.
 */
export function compressorFor(
  method: CompressionMethodName,
  length: number,
  adaptiveThreshold?: number,
): Compressor {
  if (method === "adaptive") return adaptiveCompressor(length, adaptiveThreshold);
  const codec = CODECS.find((candidate) => candidate.name === method);
  if (codec === undefined) {
    throw new SwarmError(SwarmErrorCode.MALFORMED_MESSAGE, `unknown compression method ${method}`);
  }
  return codec;
}

/**
 * Decodes the output of any codec's `compress`. Refuses with `SwarmError` MALFORMED_MESSAGE
 * (unknown format or codec, truncated or trailing bytes, invalid parameters such as a non-finite
 * scale) or LENGTH_MISMATCH (the element count is not `expectedLength`); it never returns a vector
 * of the wrong length and never throws anything else.
 */
export function decompress(bytes: Uint8Array, expectedLength: number): Float32Array {
  return decodeWire(bytes, expectedLength, CODECS);
}
