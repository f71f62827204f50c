import { SwarmError, SwarmErrorCode } from "../errors.ts";
import { blockwise8Codec } from "./blockwise8.ts";
import type { Compressor } from "./compressor.ts";
import { fp16Codec } from "./fp16.ts";

/** The experiment config's default `compression.adaptiveThreshold`. */
export const DEFAULT_ADAPTIVE_THRESHOLD = 65_536;

/**
 * The "adaptive" method: blockwise 8-bit for vectors of at least `threshold` elements (where the
 * 4× saving matters and per-block scales keep the error local), fp16 for smaller ones (where
 * bandwidth is cheap and accuracy is worth more). The choice depends only on the length, which
 * every peer knows, and the bytes say which codec was used anyway.
 */
export function adaptiveCompressor(
  length: number,
  threshold: number = DEFAULT_ADAPTIVE_THRESHOLD,
): Compressor {
  if (!Number.isSafeInteger(length) || length < 0) {
    throw new SwarmError(SwarmErrorCode.LENGTH_MISMATCH, `vector length ${length} is not a count`);
  }
  if (!Number.isSafeInteger(threshold) || threshold < 1) {
    throw new SwarmError(
      SwarmErrorCode.MALFORMED_MESSAGE,
      `adaptive threshold ${threshold} is not a positive integer`,
    );
  }
  return length >= threshold ? blockwise8Codec : fp16Codec;
}
