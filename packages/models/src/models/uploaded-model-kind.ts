import { DEFAULT_MASK_PROBABILITY, isLanguageModelTask, type UploadedModelConfig } from "@barnraise/protocol";
import { uploadedModelBatches } from "../data/batch-stream.ts";
import { syntheticNextTokens, syntheticRows, syntheticSentences } from "../data/synthetic-batch.ts";
import {
  HELD_OUT_ACTIVATIONS_PER_BATCH,
  HELD_OUT_BATCH_SIZE,
  HELD_OUT_TOKENS_PER_BATCH,
} from "../evaluation/held-out-sizes.ts";
import { FLOAT_BYTES, type ModelKind } from "./model-kind.ts";
import type { UploadedModelShape } from "./trainable-model.ts";

/**
 * An organizer's uploaded TF.js Layers model, whose config names only its files and task: what its
 * batches look like comes from the built model (`shape`).
 *
 * Activation memory: the digit classifier's counts (see `mnist-mlp-kind.ts`) applied to what the
 * built model says: its input 3 times, every layer's output 8 times (a layer with a composite
 * activation keeps more, which the 25 % memory share leaves room for), its output 12 times. A
 * held-out batch holds 128 rows, or 1024 tokens' worth of sentences for a language model, and at
 * most 4 MiB of activations. Stand-in batches are rows of uniform random features with random class
 * ids or values, or full rows of random tokens for a language model (masked as the masked LM's, or
 * each labelled with the next).
 */
export function uploadedModelKind(config: UploadedModelConfig, shape: UploadedModelShape): ModelKind {
  const rows = isLanguageModelTask(config.task)
    ? Math.floor(HELD_OUT_TOKENS_PER_BATCH / shape.features)
    : HELD_OUT_BATCH_SIZE;
  const byActivations = Math.floor(HELD_OUT_ACTIVATIONS_PER_BATCH / Math.max(1, shape.activationFloats));
  return {
    bytesPerSample: FLOAT_BYTES * (3 * shape.features + 8 * shape.activationFloats + 12 * shape.outputUnits),
    heldOutBatchSize: Math.max(1, Math.min(rows, byActivations)),
    mayLackGradientKernels: true,
    syntheticBatch: (size, random) => {
      if (config.task === "next-token")
        return syntheticNextTokens(size, shape.features, shape.outputUnits, random);
      if (config.task === "masked-tokens") {
        const maskProbability = config.maskProbability ?? DEFAULT_MASK_PROBABILITY;
        return syntheticSentences(size, shape.features, shape.outputUnits, maskProbability, random);
      }
      const classes = config.task === "classification" ? shape.outputUnits : undefined;
      return syntheticRows(size, shape.features, classes, random);
    },
    batches: (records) => uploadedModelBatches(records, config, shape),
  };
}
