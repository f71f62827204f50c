import * as tf from "@tensorflow/tfjs-core";
import type { ParameterLayout } from "@barnraise/swarm";
import { DropoutSeeds, albertMaskedLogits } from "./albert-forward.ts";
import { type AlbertMlmConfig, albertParameterSpecs } from "./albert-parameters.ts";
import type { Batch, MaskedTokenBatch } from "./batch.ts";
import { checkMaskedTokenBatch } from "./batch-checks.ts";
import { lossAndAccuracy, softmaxCrossEntropy } from "./layer-ops.ts";
import { checkSeed } from "./model-error.ts";
import type { EvaluationResult, GradientResult, TrainableModel } from "./trainable-model.ts";
import { VariableSet } from "./variable-set.ts";
import type { ModelKind } from "./model-kind.ts";
import { albertMlmKind } from "./albert-mlm-kind.ts";

/**
 * The "albert-mlm" kind: an ALBERT-style masked language model (Lan et al. 2019) — factorized
 * embeddings, one transformer layer shared across all depths, and an MLM head tied to the token
 * embeddings. The loss is the cross-entropy averaged over the cells whose label is ≥ 0.
 *
 * A batch without any such cell scores nothing: `computeGradients` returns loss 0 and a zero
 * gradient (it still counts its sentences as samples), and `evaluate` returns 0 predictions.
 */
export class AlbertMlm implements TrainableModel {
  readonly config: AlbertMlmConfig;
  readonly kind: ModelKind;
  readonly layout: ParameterLayout;
  readonly #parameters: VariableSet;

  /** Throws INVALID_CONFIG when hiddenSize is not divisible by numHeads. */
  constructor(config: AlbertMlmConfig) {
    this.config = config;
    this.kind = albertMlmKind(config);
    this.#parameters = new VariableSet(albertParameterSpecs(config));
    this.layout = this.#parameters.layout;
  }

  initialParameters(seed: number): Float32Array {
    return this.#parameters.initialParameters(seed);
  }

  setParameters(parameters: Float32Array): void {
    this.#parameters.assign(parameters);
  }

  computeGradients(batch: Batch, seed: number): Promise<GradientResult> {
    // Bad input throws here, before any promise: only the computation is asynchronous.
    this.#parameters.checkAlive();
    checkSeed(seed, "dropout seed");
    const tokens = this.#check(batch);
    const { rows, targets } = maskedCells(tokens.labels);
    if (rows.length === 0) {
      return Promise.resolve({ loss: 0, samples: tokens.size, gradient: new Float32Array(this.layout.size) });
    }
    const dropout = this.config.dropout > 0 ? new DropoutSeeds(this.config.dropout, seed) : undefined;
    return this.#parameters
      .lossAndGradient(() => softmaxCrossEntropy(this.#logits(tokens, rows, dropout), targets))
      .then(({ loss, gradient }) => ({ loss, samples: tokens.size, gradient }));
  }

  evaluate(batch: Batch): Promise<EvaluationResult> {
    this.#parameters.checkAlive();
    const tokens = this.#check(batch);
    const { rows, targets } = maskedCells(tokens.labels);
    if (rows.length === 0) return Promise.resolve({ loss: 0, accuracy: 0, predictions: 0 });
    return lossAndAccuracy(() => this.#logits(tokens, rows, undefined), targets).then(
      ({ loss, correct }) => ({ loss, accuracy: correct / rows.length, predictions: rows.length }),
    );
  }

  dispose(): void {
    this.#parameters.dispose();
  }

  #check(batch: Batch): MaskedTokenBatch {
    return checkMaskedTokenBatch(batch, this.config.vocabSize, this.config.maxSequenceLength);
  }

  #logits(tokens: MaskedTokenBatch, rows: Int32Array, dropout: DropoutSeeds | undefined): tf.Tensor2D {
    return albertMaskedLogits(this.config, (name) => this.#parameters.get(name), tokens, rows, dropout);
  }
}

/** Flat indices of the cells to predict (label ≥ 0) and their labels. */
function maskedCells(labels: Int32Array): { rows: Int32Array; targets: Int32Array } {
  let count = 0;
  for (const label of labels) if (label >= 0) count++;
  const rows = new Int32Array(count);
  const targets = new Int32Array(count);
  let next = 0;
  labels.forEach((label, index) => {
    if (label < 0) return;
    rows[next] = index;
    targets[next] = label;
    next++;
  });
  return { rows, targets };
}
