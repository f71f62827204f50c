import type { CompressionMethod } from "@barnraise/protocol";
import { SwarmError, SwarmErrorCode } from "../errors.ts";
import { adaptiveCompressor } from "./adaptive.ts";
import { blockwise8Codec } from "./blockwise8.ts";
import type { CodecName, Compressor } from "./compressor.ts";
import { fp16Codec } from "./fp16.ts";
import { noneCodec } from "./none.ts";
import { quantile8Codec } from "./quantile8.ts";
import { sparseCodec } from "./sparse.ts";
import { topkCodec } from "./topk.ts";
import { topkMeanDecoder } from "./topk-mean.ts";
import { uniform8Codec } from "./uniform8.ts";
import { decodeWire, type Codec, type CodecDecoder } from "./wire.ts";

export type { CodecName, Compressor } from "./compressor.ts";
export { DEFAULT_ADAPTIVE_THRESHOLD } from "./adaptive.ts";
export { DEFAULT_TOPK_DENSITY } from "./topk.ts";
export { encodeTopkMean, isTopkEncoding, topkMeanBytes, type TopkMeanEntry } from "./topk-mean.ts";

/** A `compression.method` of the experiment config: a codec, or "adaptive". */
export type CompressionMethodName = (typeof CompressionMethod)[keyof typeof CompressionMethod];

/** The decoders, and each codec's default instance (topk's decoder reads k from the bytes). */
const CODECS: readonly Codec[] = [
  noneCodec,
  fp16Codec,
  uniform8Codec,
  quantile8Codec,
  blockwise8Codec,
  topkCodec(),
  sparseCodec,
];

/** What `decompress` reads: every codec, and a topk round's mean as its contributions. */
const DECODERS: readonly CodecDecoder[] = [...CODECS, topkMeanDecoder];

/** Every concrete codec, in wire-id order ("adaptive" is a choice between two of them). */
export const CODEC_NAMES: readonly CodecName[] = Object.freeze(CODECS.map((codec) => codec.name));

/**
 * The compressor for a vector of `length` elements under `method` (a config method, or any codec
 * by name). Only "adaptive" looks at the length: blockwise8 when `length >= adaptiveThreshold`
 * (default 65,536), fp16 otherwise. "topk" keeps `topkDensity` of each block (default 0.015, in
 * (0, 1]).
 */
export function compressorFor(
  method: CompressionMethodName | CodecName,
  length: number,
  adaptiveThreshold?: number,
  topkDensity?: number,
): Compressor {
  if (method === "adaptive") return adaptiveCompressor(length, adaptiveThreshold);
  if (method === "topk") return topkCodec(topkDensity);
  const codec = CODECS.find((candidate) => candidate.name === method);
  if (codec === undefined) {
    throw new SwarmError(SwarmErrorCode.MALFORMED_MESSAGE, `unknown compression method ${method}`);
  }
  return codec;
}

/**
 * The codec a reducer sends its averaged results in when the round's chunks come in `compressor`:
 * "sparse" for "topk" (the mean of sparse contributions is sparse, and every nonzero of it must
 * arrive), the round's own codec for every other.
 */
export function resultCompressorFor(compressor: Compressor): Compressor {
  return compressor.name === "topk" ? sparseCodec : compressor;
}

/**
 * Decodes the output of any codec's `compress`. Refuses with `SwarmError` MALFORMED_MESSAGE
 * (unknown format or codec, truncated or trailing bytes, invalid parameters such as a non-finite
 * scale) or LENGTH_MISMATCH (the element count is not `expectedLength`); it never returns a vector
 * of the wrong length and never throws anything else.
 */
export function decompress(bytes: Uint8Array, expectedLength: number): Float32Array {
  return decodeWire(bytes, expectedLength, DECODERS);
}

/** What `compressWithFeedback` sent: the bytes, and what the receiver decodes from them. */
export interface SentWithFeedback {
  bytes: Uint8Array;
  sent: Float32Array;
}

/**
 * Compresses `values` for sending with error feedback: writes into `residualOut` (as long as
 * `values`, not overlapping it) what the receiver will not get, `values[i] − sent[i]` with `sent`
 * = decompress(bytes) (rounded to float32), and returns the bytes and `sent`. Adding the residual to
 * the next round's input carries it forward, so over many rounds nothing is lost but the last
 * residual. Throws what the codec throws (a non-finite value: MALFORMED_MESSAGE), and
 * LENGTH_MISMATCH for a residual of another length.
 */
export function compressWithFeedback(
  compressor: Compressor,
  values: Float32Array,
  residualOut: Float32Array,
): SentWithFeedback {
  if (residualOut.length !== values.length) {
    throw new SwarmError(
      SwarmErrorCode.LENGTH_MISMATCH,
      `residual has ${residualOut.length} elements, the values ${values.length}`,
    );
  }
  const bytes = compressor.compress(values);
  const sent = decompress(bytes, values.length);
  for (let i = 0; i < values.length; i++) residualOut[i] = (values[i] ?? 0) - (sent[i] ?? 0);
  return { bytes, sent };
}
