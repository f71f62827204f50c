import type { MaskedTokenBatch } from "../models/batch.ts";
import type { SeededRandom } from "../seeded-random.ts";
import type { SpecialTokens } from "./token-decoder.ts";

/** Share of chosen positions replaced by [MASK]; of the rest, half get a random token, half stay. */
const MASK_SHARE = 0.8;
const RANDOM_SHARE = 0.1;

/** Options of `MaskedTokenBatcher`. */
export interface MaskedTokenBatcherOptions {
  /** Row length, [CLS] and [SEP] included (the model's `maxSequenceLength`). */
  readonly sequenceLength: number;
  /** Probability that a sentence token is chosen for prediction (the model's `maskProbability`). */
  readonly maskProbability: number;
  /** Ids in the data are below this (the manifest's `vocabulary.size`); random tokens are drawn from it. */
  readonly vocabSize: number;
  readonly specialTokens: SpecialTokens;
  readonly random: SeededRandom;
}

/**
 * Builds masked-LM batches the BERT way: each row is `[CLS] sentence… [SEP] [PAD]…`, the sentence
 * truncated to fit. Every sentence token (not [CLS]/[SEP]/[PAD]; [UNK] counts, since it stands for a
 * real word) is chosen with probability `maskProbability`, at least one per sentence; a chosen
 * token becomes [MASK] 80 % of the time, a random ordinary token 10 %, and stays 10 %. Labels hold
 * the original id at chosen positions and -1 elsewhere.
 */
export class MaskedTokenBatcher {
  readonly #options: MaskedTokenBatcherOptions;
  readonly #firstOrdinary: number;

  constructor(options: MaskedTokenBatcherOptions) {
    if (!Number.isInteger(options.sequenceLength) || options.sequenceLength < 3) {
      throw new RangeError(
        `sequenceLength must be an integer ≥ 3 ([CLS], a token, [SEP]), got ${options.sequenceLength}`,
      );
    }
    if (!(options.maskProbability > 0 && options.maskProbability < 1)) {
      throw new RangeError(`maskProbability must be in (0, 1), got ${options.maskProbability}`);
    }
    // The specials are ids 0…4 (the manifest schema fixes them); ordinary tokens follow.
    this.#firstOrdinary = Math.max(...Object.values(options.specialTokens)) + 1;
    if (options.vocabSize <= this.#firstOrdinary) {
      throw new RangeError(`the vocabulary (${options.vocabSize} ids) has no ordinary tokens to sample from`);
    }
    this.#options = options;
  }

  /** One batch of `sentences.length` rows. */
  batch(sentences: readonly Uint16Array[]): MaskedTokenBatch {
    const { sequenceLength, specialTokens } = this.#options;
    const size = sentences.length;
    const inputIds = new Int32Array(size * sequenceLength).fill(specialTokens.pad);
    const labels = new Int32Array(size * sequenceLength).fill(-1);
    const attentionMask = new Float32Array(size * sequenceLength);
    sentences.forEach((sentence, row) => {
      const offset = row * sequenceLength;
      const kept = Math.min(sentence.length, sequenceLength - 2);
      inputIds[offset] = specialTokens.cls;
      inputIds.set(sentence.subarray(0, kept), offset + 1);
      inputIds[offset + kept + 1] = specialTokens.sep;
      attentionMask.fill(1, offset, offset + kept + 2);
      this.#mask(inputIds, labels, offset + 1, kept);
    });
    return { kind: "masked-tokens", size, sequenceLength, inputIds, labels, attentionMask };
  }

  /** Chooses and corrupts positions `start … start + count - 1` (the sentence tokens of a row). */
  #mask(inputIds: Int32Array, labels: Int32Array, start: number, count: number): void {
    const { maskProbability, random } = this.#options;
    let chosen = 0;
    for (let i = start; i < start + count; i++) {
      if (random.nextFloat() < maskProbability) {
        this.#corrupt(inputIds, labels, i);
        chosen++;
      }
    }
    if (chosen === 0 && count > 0) this.#corrupt(inputIds, labels, start + random.int(count));
  }

  #corrupt(inputIds: Int32Array, labels: Int32Array, at: number): void {
    const { random, specialTokens, vocabSize } = this.#options;
    labels[at] = inputIds[at] ?? specialTokens.unk;
    const roll = random.nextFloat();
    if (roll < MASK_SHARE) {
      inputIds[at] = specialTokens.mask;
    } else if (roll < MASK_SHARE + RANDOM_SHARE) {
      inputIds[at] = this.#firstOrdinary + random.int(vocabSize - this.#firstOrdinary);
    }
  }
}
