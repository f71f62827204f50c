import { SPECIAL_TOKENS } from "@barnraise/protocol";
import type { Batch, ImageBatch, MaskedTokenBatch, NextTokenBatch, TabularBatch } from "../models/batch.ts";
import { DIGIT_CLASSES, IMAGE_PIXELS } from "../models/batch-checks.ts";
import type { ModelKind } from "../models/model-kind.ts";
import { SeededRandom } from "../seeded-random.ts";

/**
 * Stand-in minibatches of a model's exact shape, filled from a seeded generator. The peer times a
 * few training steps on them to pick its batch size before the first shard has downloaded; what
 * they contain does not matter, only that they cost what a real batch of that size costs.
 */

/** Special token ids: a token's id is its line in the vocabulary, and the specials come first. */
const CLS = SPECIAL_TOKENS.indexOf("[CLS]");
const SEP = SPECIAL_TOKENS.indexOf("[SEP]");
const MASK = SPECIAL_TOKENS.indexOf("[MASK]");
const FIRST_ORDINARY = SPECIAL_TOKENS.length;

/** Generator stream of synthetic batches, apart from every other use of the same seed. */
const SYNTHETIC_STREAM = 0x5b7a7c4;

/**
 * `size` samples shaped for the model whose kind is `kind` (`TrainableModel.kind`), drawn from
 * `seed` (see `ModelKind.syntheticBatch`). Throws RangeError unless `size` is a positive integer and
 * `seed` a safe integer.
 */
export function syntheticBatch(kind: Pick<ModelKind, "syntheticBatch">, size: number, seed: number): Batch {
  if (!Number.isSafeInteger(size) || size < 1) {
    throw new RangeError(`synthetic batch size must be a positive integer, got ${size}`);
  }
  return kind.syntheticBatch(size, new SeededRandom(seed, SYNTHETIC_STREAM));
}

/** Full rows of random ordinary tokens, each position labelled with the next (a next-token model's batch). */
export function syntheticNextTokens(
  size: number,
  sequenceLength: number,
  vocabSize: number,
  random: SeededRandom,
): NextTokenBatch {
  const cells = size * sequenceLength;
  const inputIds = new Int32Array(cells);
  const labels = new Int32Array(cells);
  for (let cell = 0; cell < cells; cell++) {
    inputIds[cell] =
      cell % sequenceLength === 0 ? CLS : FIRST_ORDINARY + random.int(vocabSize - FIRST_ORDINARY);
    if (cell % sequenceLength > 0) labels[cell - 1] = inputIds[cell] ?? -1;
    if (cell % sequenceLength === sequenceLength - 1) labels[cell] = SEP;
  }
  return {
    kind: "next-tokens",
    size,
    sequenceLength,
    inputIds,
    labels,
    attentionMask: new Float32Array(cells).fill(1),
  };
}

/** Rows of uniform features; class ids below `classes`, or values in [-1, 1) for a regression. */
export function syntheticRows(
  size: number,
  features: number,
  classes: number | undefined,
  random: SeededRandom,
): TabularBatch {
  const values = new Float32Array(size * features);
  for (let i = 0; i < values.length; i++) values[i] = random.nextFloat();
  const labels = new Float32Array(size);
  for (let i = 0; i < size; i++)
    labels[i] = classes === undefined ? 2 * random.nextFloat() - 1 : random.int(classes);
  return { kind: "tabular", size, features: values, labels };
}

/** Images of uniform random pixels with random digit labels. */
export function syntheticImages(size: number, random: SeededRandom): ImageBatch {
  const pixels = new Float32Array(size * IMAGE_PIXELS);
  for (let i = 0; i < pixels.length; i++) pixels[i] = random.nextFloat();
  const labels = new Int32Array(size);
  for (let i = 0; i < size; i++) labels[i] = random.int(DIGIT_CLASSES);
  return { kind: "image", size, pixels, labels };
}

/**
 * Full-length sentences `[CLS] tokens… [SEP]` (no padding: the most expensive row) in which each
 * token becomes [MASK] with `maskProbability`, at least one per sentence, as the real batcher
 * chooses them, so the MLM head scores about as many cells as in training.
 */
export function syntheticSentences(
  size: number,
  sequenceLength: number,
  vocabSize: number,
  maskProbability: number,
  random: SeededRandom,
): MaskedTokenBatch {
  const inputIds = new Int32Array(size * sequenceLength);
  const labels = new Int32Array(size * sequenceLength).fill(-1);
  const attentionMask = new Float32Array(size * sequenceLength).fill(1);
  // The config schema keeps maxSequenceLength ≥ 8; an uploaded masked model's input is checked ≥ 3.
  const words = Math.max(1, sequenceLength - 2);
  for (let row = 0; row < size; row++) {
    const start = row * sequenceLength;
    inputIds[start] = CLS;
    inputIds[start + sequenceLength - 1] = SEP;
    let masked = 0;
    for (let cell = start + 1; cell < start + 1 + words; cell++) {
      inputIds[cell] = FIRST_ORDINARY + random.int(vocabSize - FIRST_ORDINARY);
      if (random.nextFloat() < maskProbability) {
        mask(inputIds, labels, cell);
        masked++;
      }
    }
    if (masked === 0) mask(inputIds, labels, start + 1 + random.int(words));
  }
  return { kind: "masked-tokens", size, sequenceLength, inputIds, labels, attentionMask };
}

/** Hides the token at `cell` behind [MASK] and makes it the label. */
function mask(inputIds: Int32Array, labels: Int32Array, cell: number): void {
  labels[cell] = inputIds[cell] ?? -1;
  inputIds[cell] = MASK;
}
