import { maskedSentenceBatches } from "../data/batch-stream.ts";
import { syntheticSentences } from "../data/synthetic-batch.ts";
import { HELD_OUT_TOKENS_PER_BATCH } from "../evaluation/held-out-sizes.ts";
import type { AlbertMlmConfig } from "./albert-parameters.ts";
import { FLOAT_BYTES, type ModelKind } from "./model-kind.ts";

/**
 * The masked language model preset (`albert-mlm`): sentences of `tokens-u16le` records with a share
 * of their tokens masked.
 *
 * Activation memory per sentence of T tokens (full length: the batcher pads to it), counted as for
 * the digit classifier (see `mnist-mlp-kind.ts`): the embeddings 48·T·E; per layer (the shared layer
 * runs numLayers times, and each run keeps its own activations) 96·T·H for the projections,
 * residuals and two layer norms, 32·T·I for the GELU feed-forward and 16·heads·T² for the attention
 * scores, softmax and dropout; and 16·V for each masked cell the head scores (logits, log-softmax,
 * one-hot targets), about maskProbability·T + 1. A held-out batch holds 1024 tokens' worth of
 * sentences.
 */
export function albertMlmKind(config: AlbertMlmConfig): ModelKind {
  const T = config.maxSequenceLength;
  const perLayer =
    96 * T * config.hiddenSize + 32 * T * config.intermediateSize + 16 * config.numHeads * T * T;
  const maskedCells = config.maskProbability * T + 1;
  const floats =
    48 * T * config.embeddingSize + config.numLayers * perLayer + 16 * maskedCells * config.vocabSize;
  return {
    bytesPerSample: FLOAT_BYTES * floats,
    heldOutBatchSize: Math.max(1, Math.floor(HELD_OUT_TOKENS_PER_BATCH / T)),
    mayLackGradientKernels: false,
    syntheticBatch: (size, random) =>
      syntheticSentences(size, T, config.vocabSize, config.maskProbability, random),
    batches: (records) => maskedSentenceBatches(records, config),
  };
}
