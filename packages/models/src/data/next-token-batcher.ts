import type { NextTokenBatch } from "../models/batch.ts";
import type { SpecialTokens } from "./token-decoder.ts";

/**
 * Builds next-token batches: each sentence becomes `[CLS] tokens… [SEP]`, cut to
 * `sequenceLength + 1` ids; the row's input is its first `sequenceLength` ids (padded with [PAD])
 * and the label at position i is the id at i + 1. So the model learns to predict every token of the
 * sentence from the ones before it, and [SEP] after the last; positions past the sentence predict
 * nothing (-1). A sentence longer than the row loses its tail, as the masked LM's rows do.
 */
export function nextTokenBatch(
  sentences: readonly Uint16Array[],
  sequenceLength: number,
  specialTokens: SpecialTokens,
): NextTokenBatch {
  if (!Number.isInteger(sequenceLength) || sequenceLength < 1) {
    throw new RangeError(`sequenceLength must be a positive integer, got ${sequenceLength}`);
  }
  const size = sentences.length;
  const inputIds = new Int32Array(size * sequenceLength).fill(specialTokens.pad);
  const labels = new Int32Array(size * sequenceLength).fill(-1);
  const attentionMask = new Float32Array(size * sequenceLength);
  sentences.forEach((sentence, row) => {
    const offset = row * sequenceLength;
    // [CLS] sentence [SEP], of which the row reads up to sequenceLength ids and predicts the next.
    const kept = Math.min(sentence.length, sequenceLength);
    const full = Int32Array.of(specialTokens.cls, ...sentence.subarray(0, kept), specialTokens.sep);
    const read = Math.min(full.length - 1, sequenceLength);
    inputIds.set(full.subarray(0, read), offset);
    labels.set(full.subarray(1, read + 1), offset);
    attentionMask.fill(1, offset, offset + read);
  });
  return { kind: "next-tokens", size, sequenceLength, inputIds, labels, attentionMask };
}
