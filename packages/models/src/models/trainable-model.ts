import type { MetricName, ModelConfig } from "@barnraise/protocol";
import type { ParameterLayout } from "@barnraise/swarm";
import type { Batch } from "./batch.ts";
import type { ModelKind } from "./model-kind.ts";

/** One minibatch's forward and backward pass. */
export interface GradientResult {
  /** Mean loss over the batch's predictions. */
  readonly loss: number;
  /** Samples in the batch (sentences for the masked LM). */
  readonly samples: number;
  /** Mean gradient over the batch, flat in `layout` order, length `layout.size`. */
  readonly gradient: Float32Array;
}

export interface EvaluationResult {
  readonly loss: number;
  /**
   * Share of correct predictions: digits, masked tokens for the masked LM, rows for an uploaded
   * classifier. NaN for a regression model, which has nothing to be right or wrong about.
   */
  readonly accuracy: number;
  /** Predictions scored: images, masked tokens, or rows. */
  readonly predictions: number;
  /** An uploaded model's metrics (`model.metrics` of its config), each a mean over the predictions. */
  readonly metrics?: Readonly<Partial<Record<MetricName, number>>>;
}

/**
 * What an uploaded model's minibatches look like, read from the built model: a preset's config
 * fixes these, an uploaded model's config only names its files.
 */
export interface UploadedModelShape {
  /**
   * The input shape without the batch dimension; a row's features fill it row-major. A language
   * model's is [positions]: the token ids of one row.
   */
  readonly inputShape: readonly number[];
  /** Features per row: the product of `inputShape` (a language model's positions). */
  readonly features: number;
  /**
   * Width of the output layer: the classes of a classifier, 1 for a regression on one value, the
   * vocabulary of a language model (a distribution at every position).
   */
  readonly outputUnits: number;
  /**
   * The token ids the model's Embedding layers read (the smallest `inputDim`); absent without one.
   * A language model's text must have no larger vocabulary.
   */
  readonly tokenIds?: number;
  /** Floats every layer's output holds for one row, summed: what the activations scale with. */
  readonly activationFloats: number;
}

/**
 * A model (a preset or an uploaded one) as the training loop sees it: parameters live in TF.js
 * variables, and cross to the swarm engine as one flat Float32Array in `layout` order (parameters,
 * gradients and optimizer moments all use that layout). The collaborative optimizer owns the parameter values; the model
 * only computes with them.
 */
export interface TrainableModel {
  readonly config: ModelConfig;
  readonly layout: ParameterLayout;
  /** An uploaded model's input and output widths; absent for the presets. */
  readonly uploaded?: UploadedModelShape;
  /** What differs for this kind of model: its batches, their memory, stand-in and held-out batches. */
  readonly kind: ModelKind;
  /**
   * Deterministic initial parameters: the same bits for the same config and seed on every machine
   * and backend (drawn in JavaScript from a seeded generator, not by TF.js; an uploaded model's own
   * weights, whatever the seed).
   */
  initialParameters(seed: number): Float32Array;
  /** Copies a flat vector (length `layout.size`) into the model's variables. */
  setParameters(parameters: Float32Array): void;
  /**
   * Forward and backward at the current parameters; dropout (if any) is drawn from `seed`. Bad
   * input throws at once; the values are read back asynchronously (GPU backends cannot read
   * synchronously in Node).
   */
  computeGradients(batch: Batch, seed: number): Promise<GradientResult>;
  /** Forward only, no dropout; asynchronous like computeGradients. */
  evaluate(batch: Batch): Promise<EvaluationResult>;
  /** Frees every tensor the model holds. */
  dispose(): void;
}
