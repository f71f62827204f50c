/**
 * The models a node trains and scores, and what feeds them: the presets and uploaded Layers models
 * (`models/`), the datasets, their batches and the synthetic batches (`data/`), the held-out
 * evaluation (`evaluation/`) and the choice of a TF.js backend (`tf/`). The volunteer peer trains
 * with them, the aux scores checkpoints with them. What they need of Node.js (caches in directories,
 * the Node.js backends, Dawn's WebGPU binding) is in `./node` (`@barnraise/models/node`).
 */
export * from "./seeded-random.ts";
export * from "./storage/blob-store.ts";
export * from "./data/batch-stream.ts";
export * from "./data/cached-dataset-source.ts";
export * from "./data/dataset-error.ts";
export * from "./data/dataset-source.ts";
export * from "./data/http-dataset-source.ts";
export * from "./data/image-batcher.ts";
export * from "./data/image-decoder.ts";
export * from "./data/masked-token-batcher.ts";
export * from "./data/mnist-decoder.ts";
export * from "./data/next-token-batcher.ts";
export * from "./data/parse-manifest.ts";
export * from "./data/read-body.ts";
export * from "./data/retry.ts";
export * from "./data/sha256.ts";
export * from "./data/shard-stream.ts";
export * from "./data/shuffle-buffer.ts";
export * from "./data/synthetic-batch.ts";
export * from "./data/tabular-batcher.ts";
export * from "./data/tabular-decoder.ts";
export * from "./data/token-decoder.ts";
export * from "./evaluation/evaluate.ts";
export * from "./evaluation/held-out-evaluation.ts";
export * from "./models/albert-forward.ts";
export * from "./models/albert-mlm.ts";
export * from "./models/albert-mlm-kind.ts";
export * from "./models/albert-parameters.ts";
export * from "./models/auto-batch-size.ts";
export * from "./models/batch-checks.ts";
export * from "./models/batch.ts";
export * from "./models/model-kinds.ts";
export * from "./models/fetch-layers-artifact.ts";
export * from "./models/layer-ops.ts";
export * from "./models/layers-artifact.ts";
export * from "./models/layers-loss.ts";
export * from "./models/layers-model.ts";
export * from "./models/mnist-mlp.ts";
export * from "./models/mnist-mlp-kind.ts";
export * from "./models/model-kind.ts";
export * from "./models/model-error.ts";
export * from "./models/tfjs-gradients.ts";
export * from "./models/trainable-model.ts";
export * from "./models/uploaded-model-kind.ts";
export * from "./models/variable-set.ts";
export * from "./tf/backend-kernels.ts";
export * from "./tf/backend.ts";
export * from "./tf/benchmark-backend.ts";
export * from "./yield-to-events.ts";
