import type { CompressionMethod } from "@barnraise/protocol";

/**
 * A concrete wire codec: every config method but "adaptive" (which picks one of these per vector,
 * see `adaptiveCompressor`), and "sparse" and "topk-mean", which only carry a topk round's
 * averaged results (see `resultCompressorFor` and `encodeTopkMean`).
 */
export type CodecName =
  Exclude<(typeof CompressionMethod)[keyof typeof CompressionMethod], "adaptive"> | "sparse" | "topk-mean";

/**
 * One small interface for every codec (hivemind's compress / extract / estimate_ratio). The
 * encoded bytes are self-describing (codec id, element count, codec parameters, payload), so a
 * receiver decodes without knowing the sender's choice, and malformed or truncated bytes are
 * refused with a `SwarmError` (MALFORMED_MESSAGE), never decoded into garbage.
 */
export interface Compressor {
  readonly name: CodecName;
  /**
   * Payload bits per element, not counting the codec's parameters (scales, codebook) or header;
   * for topk, every byte of a full block (its levels and index are most of what it sends).
   */
  readonly bitsPerElement: number;
  /** Encodes `values`. Never modifies its input. */
  compress(values: Float32Array): Uint8Array;
  /** Encoded size divided by raw float32 size, for a vector of `length` elements (≤ 1 means smaller). */
  estimateRatio(length: number): number;
}
