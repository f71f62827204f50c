import type { ModelConfig } from "@barnraise/protocol";
import { digitBatches } from "../data/batch-stream.ts";
import { syntheticImages } from "../data/synthetic-batch.ts";
import { HELD_OUT_BATCH_SIZE } from "../evaluation/held-out-sizes.ts";
import { DIGIT_CLASSES, IMAGE_PIXELS } from "./batch-checks.ts";
import { FLOAT_BYTES, type ModelKind } from "./model-kind.ts";

/**
 * The digit classifier (`mnist-mlp`): 28×28 images of `mnist-u8` records.
 *
 * Activation memory (see `ModelKind.bytesPerSample`): TF.js keeps every tensor a gradient rule saved
 * in the forward pass until the backward pass has used it, and the backward pass allocates a
 * gradient of the same shape for each, plus the temporaries of composite ops. So the estimate sums
 * the activation shapes of one sample, each times the number of float32 copies of it alive at once,
 * counted against `tf.profile` peaks on the cpu backend and rounded up: the 784 pixels 3 times (2
 * measured, plus one as slack, since they dominate narrow networks), each hidden unit 8 times (32
 * with GELU, whose tanh approximation is six ops), the 10 logits 12 times (softmax cross-entropy and
 * its one-hot targets).
 */
export function mnistMlpKind(config: Extract<ModelConfig, { kind: "mnist-mlp" }>): ModelKind {
  const perHiddenUnit = config.activation === "gelu" ? 32 : 8;
  const hiddenUnits = config.hiddenUnits.reduce((sum, units) => sum + units, 0);
  return {
    bytesPerSample: FLOAT_BYTES * (3 * IMAGE_PIXELS + perHiddenUnit * hiddenUnits + 12 * DIGIT_CLASSES),
    heldOutBatchSize: HELD_OUT_BATCH_SIZE,
    mayLackGradientKernels: false,
    syntheticBatch: (size, random) => syntheticImages(size, random),
    batches: (records) => digitBatches(records),
  };
}
