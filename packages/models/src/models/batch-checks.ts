import { MNIST_DIGIT_CLASSES, MNIST_IMAGE_PIXELS } from "@barnraise/protocol";
import type { Batch, ImageBatch, MaskedTokenBatch, TabularBatch, TokenBatch } from "./batch.ts";
import { ModelError, ModelErrorCode } from "./model-error.ts";

/**
 * Checks a minibatch before it reaches TF.js, which would otherwise accept out-of-range labels or
 * token ids silently (a one-hot of label 12 is all zeros; a gather past the vocabulary reads
 * garbage or throws deep inside a kernel). Batches come from shards other people uploaded, so a
 * bad one must fail here, with a message that names the field.
 */

/** Pixels per MNIST image (28 × 28), as the protocol's mnist-mlp layout has them. */
export const IMAGE_PIXELS = MNIST_IMAGE_PIXELS;
/** Digit classes. */
export const DIGIT_CLASSES = MNIST_DIGIT_CLASSES;

/** Returns `batch` as an ImageBatch, or throws WRONG_BATCH_KIND / MALFORMED_BATCH. */
export function checkImageBatch(batch: Batch): ImageBatch {
  if (batch.kind !== "image") {
    throw new ModelError(
      ModelErrorCode.WRONG_BATCH_KIND,
      `mnist-mlp trains on image batches, got a "${batch.kind}" batch: check the dataset in the config`,
    );
  }
  checkSize(batch.size);
  checkArray(batch.pixels, Float32Array, batch.size * IMAGE_PIXELS, "pixels");
  checkArray(batch.labels, Int32Array, batch.size, "labels");
  for (let i = 0; i < batch.labels.length; i++) {
    const label = batch.labels[i] ?? -1;
    if (label < 0 || label >= DIGIT_CLASSES) {
      throw malformed(`labels[${i}] is ${label}; digit labels must be 0…${DIGIT_CLASSES - 1}`);
    }
  }
  return batch;
}

/** Returns `batch` as a MaskedTokenBatch that fits the model, or throws WRONG_BATCH_KIND / MALFORMED_BATCH. */
export function checkMaskedTokenBatch(
  batch: Batch,
  vocabSize: number,
  maxSequenceLength: number,
): MaskedTokenBatch {
  if (batch.kind !== "masked-tokens") {
    throw new ModelError(
      ModelErrorCode.WRONG_BATCH_KIND,
      `albert-mlm trains on masked-token batches, got a "${batch.kind}" batch: check the dataset in the config`,
    );
  }
  const length = batch.sequenceLength;
  if (!Number.isSafeInteger(length) || length < 1 || length > maxSequenceLength) {
    throw malformed(`sequenceLength is ${length}; the model takes 1…${maxSequenceLength} tokens`);
  }
  checkTokenCells(batch, vocabSize);
  return batch;
}

/**
 * Returns `batch` as a token batch of `kind` for an uploaded language model that reads exactly
 * `sequenceLength` ids below `vocabSize` and predicts ids below it, or throws WRONG_BATCH_KIND /
 * MALFORMED_BATCH.
 */
export function checkTokenBatch(
  batch: Batch,
  kind: TokenBatch["kind"],
  vocabSize: number,
  sequenceLength: number,
): TokenBatch {
  if (batch.kind !== kind) {
    throw new ModelError(
      ModelErrorCode.WRONG_BATCH_KIND,
      `this language model trains on "${kind}" batches, got a "${batch.kind}" batch: check the task and dataset in the config`,
    );
  }
  if (batch.sequenceLength !== sequenceLength) {
    throw malformed(`sequenceLength is ${batch.sequenceLength}; the model reads ${sequenceLength} tokens`);
  }
  checkTokenCells(batch, vocabSize);
  return batch;
}

/** Ids, labels and mask of a token batch: as many as its cells, ids in the vocabulary, labels -1 or an id. */
function checkTokenCells(batch: TokenBatch, vocabSize: number): void {
  checkSize(batch.size);
  const cells = batch.size * batch.sequenceLength;
  checkArray(batch.inputIds, Int32Array, cells, "inputIds");
  checkArray(batch.labels, Int32Array, cells, "labels");
  checkArray(batch.attentionMask, Float32Array, cells, "attentionMask");
  for (let i = 0; i < cells; i++) {
    const id = batch.inputIds[i] ?? -1;
    if (id < 0 || id >= vocabSize) {
      throw malformed(`inputIds[${i}] is ${id}; token ids must be 0…${vocabSize - 1}`);
    }
    const label = batch.labels[i] ?? 0;
    if (label < -1 || label >= vocabSize) {
      throw malformed(`labels[${i}] is ${label}; labels must be -1 or a token id below ${vocabSize}`);
    }
    const mask = batch.attentionMask[i];
    if (mask !== 0 && mask !== 1) {
      throw malformed(`attentionMask[${i}] is ${mask}; it must be 1 for tokens and 0 for padding`);
    }
  }
}

/**
 * Returns `batch` as a TabularBatch that fits an uploaded model with `features` inputs, or throws
 * WRONG_BATCH_KIND / MALFORMED_BATCH. `classes` bounds a classifier's labels (whole ids below it);
 * a regression's labels (`classes` undefined) need only be finite. Features must be finite too:
 * one NaN would turn the whole averaged gradient into NaN.
 */
export function checkTabularBatch(batch: Batch, features: number, classes: number | undefined): TabularBatch {
  if (batch.kind !== "tabular") {
    throw new ModelError(
      ModelErrorCode.WRONG_BATCH_KIND,
      `an uploaded model trains on tabular batches, got a "${batch.kind}" batch: check the dataset in the config`,
    );
  }
  checkSize(batch.size);
  checkArray(batch.features, Float32Array, batch.size * features, "features");
  checkArray(batch.labels, Float32Array, batch.size, "labels");
  for (let i = 0; i < batch.features.length; i++) {
    const value = batch.features[i] ?? NaN;
    if (!Number.isFinite(value)) {
      throw malformed(
        `features[${i}] (row ${Math.floor(i / features)}) is ${value}; features must be finite numbers`,
      );
    }
  }
  for (let i = 0; i < batch.labels.length; i++) {
    const label = batch.labels[i] ?? NaN;
    if (
      classes === undefined
        ? !Number.isFinite(label)
        : !Number.isInteger(label) || label < 0 || label >= classes
    ) {
      throw malformed(
        classes === undefined
          ? `labels[${i}] is ${label}; regression labels must be finite numbers`
          : `labels[${i}] is ${label}; class labels must be whole numbers 0…${classes - 1}`,
      );
    }
  }
  return batch;
}

function checkSize(size: number): void {
  if (!Number.isSafeInteger(size) || size < 1) {
    throw malformed(`batch size is ${size}; it must be a positive integer`);
  }
}

function checkArray(
  array: unknown,
  type: Float32ArrayConstructor | Int32ArrayConstructor,
  length: number,
  field: string,
): void {
  if (!(array instanceof type)) {
    throw malformed(`${field} must be a ${type.name}`);
  }
  if (array.length !== length) {
    throw malformed(`${field} has ${array.length} elements, expected ${length}`);
  }
}

function malformed(message: string): ModelError {
  return new ModelError(ModelErrorCode.MALFORMED_BATCH, message);
}
