/**
 * The minibatches the data pipeline hands to a model. All are flat, row-major typed arrays, so a
 * batch crosses from the data code to TF.js without per-sample objects.
 */

/** MNIST digits: `size` images of 28×28 pixels scaled to [0, 1], row-major, and one label 0…9 each. */
export interface ImageBatch {
  readonly kind: "image";
  readonly size: number;
  /** `size · 784` values in [0, 1]. */
  readonly pixels: Float32Array;
  /** `size` class indices. */
  readonly labels: Int32Array;
}

/**
 * Masked sentences for the masked-LM preset: each row is `[CLS] tokens… [SEP] [PAD]…`, exactly
 * `sequenceLength` ids long. `labels` holds the original id where the model must predict a token
 * (the masked positions) and -1 everywhere else.
 */
export interface MaskedTokenBatch {
  readonly kind: "masked-tokens";
  readonly size: number;
  readonly sequenceLength: number;
  /** `size · sequenceLength` token ids. */
  readonly inputIds: Int32Array;
  /** `size · sequenceLength` ids to predict, -1 where nothing is predicted. */
  readonly labels: Int32Array;
  /** `size · sequenceLength`: 1 for real tokens (special ones included), 0 for padding. */
  readonly attentionMask: Float32Array;
}

/**
 * Sentences for an uploaded next-token model: each row is `[CLS] tokens… [SEP] [PAD]…`, cut to
 * exactly `sequenceLength` ids, and `labels` holds at each position the id that follows it in the
 * sentence (what the model predicts after reading the row up to there), -1 where the sentence has
 * ended.
 */
export interface NextTokenBatch {
  readonly kind: "next-tokens";
  readonly size: number;
  readonly sequenceLength: number;
  /** `size · sequenceLength` token ids. */
  readonly inputIds: Int32Array;
  /** `size · sequenceLength` ids to predict, -1 where nothing is predicted. */
  readonly labels: Int32Array;
  /** `size · sequenceLength`: 1 for real tokens (special ones included), 0 for padding. */
  readonly attentionMask: Float32Array;
}

/** A batch of token rows with a label per position (-1: none): masked or next-token. */
export type TokenBatch = MaskedTokenBatch | NextTokenBatch;

/**
 * Rows of a `tabular-f32` dataset for an uploaded model: each row's features fill the model's input
 * shape row-major, and its label is a class id (classification) or the value to predict (regression).
 */
export interface TabularBatch {
  readonly kind: "tabular";
  readonly size: number;
  /** `size · features` values, a row after the other. */
  readonly features: Float32Array;
  /** `size` labels: whole class ids 0 … classes − 1, or real values. */
  readonly labels: Float32Array;
}

export type Batch = ImageBatch | MaskedTokenBatch | NextTokenBatch | TabularBatch;
