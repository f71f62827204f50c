import { describe, expect, it } from "vitest";
import { MaskedTokenBatcher } from "../../src/data/masked-token-batcher.ts";
import { SeededRandom } from "../../src/seeded-random.ts";
import { SPECIALS } from "./dataset-fixture.ts";

const VOCAB = 1000;

function batcher(sequenceLength: number, seed: number, maskProbability = 0.15): MaskedTokenBatcher {
  return new MaskedTokenBatcher({
    sequenceLength,
    maskProbability,
    vocabSize: VOCAB,
    specialTokens: SPECIALS,
    random: new SeededRandom(seed),
  });
}

/** Sentences of ordinary ids with a few [UNK]s, lengths 1…30. */
function sentences(count: number, seed: number): Uint16Array[] {
  const random = new SeededRandom(seed);
  return Array.from({ length: count }, () =>
    Uint16Array.from({ length: 1 + random.int(30) }, () =>
      random.nextFloat() < 0.05 ? SPECIALS.unk : 5 + random.int(VOCAB - 5),
    ),
  );
}

describe("MaskedTokenBatcher", () => {
  it("lays out [CLS] tokens [SEP] [PAD]… with the attention mask, truncating long sentences", () => {
    const input = [Uint16Array.from([10, 11, 12]), Uint16Array.from({ length: 20 }, (_, i) => 100 + i)];
    const batch = batcher(8, 1, 0.01).batch(input);
    expect(batch).toMatchObject({ kind: "masked-tokens", size: 2, sequenceLength: 8 });
    const row = (values: ArrayLike<number>, r: number): number[] =>
      Array.from(values).slice(8 * r, 8 * r + 8);
    // Restore the chosen positions to compare the layout.
    const restored = batch.inputIds.map((id, i) =>
      (batch.labels[i] ?? -1) >= 0 ? (batch.labels[i] ?? 0) : id,
    );
    expect(row(restored, 0)).toEqual([2, 10, 11, 12, 3, 0, 0, 0]);
    expect(row(restored, 1)).toEqual([2, 100, 101, 102, 103, 104, 105, 3]);
    expect(row(batch.attentionMask, 0)).toEqual([1, 1, 1, 1, 1, 0, 0, 0]);
    expect(row(batch.attentionMask, 1)).toEqual([1, 1, 1, 1, 1, 1, 1, 1]);
  });

  it("labels only chosen sentence tokens, never specials or padding, and at least one per sentence", () => {
    const input = sentences(300, 4);
    const batch = batcher(16, 5).batch(input);
    input.forEach((sentence, r) => {
      const kept = Math.min(sentence.length, 14);
      let labelled = 0;
      for (let c = 0; c < 16; c++) {
        const label = batch.labels[16 * r + c] ?? -2;
        const id = batch.inputIds[16 * r + c] ?? -2;
        if (c === 0 || c > kept) {
          expect(label).toBe(-1);
          continue;
        }
        const original = sentence[c - 1] ?? -2;
        if (label === -1) expect(id).toBe(original);
        else {
          expect(label).toBe(original);
          labelled++;
        }
      }
      expect(labelled).toBeGreaterThanOrEqual(1);
    });
  });

  it("chooses about maskProbability of the tokens, and masks 80 % / randomises 10 % / keeps 10 %", () => {
    const input = sentences(400, 7);
    const batch = batcher(32, 8).batch(input);
    const tokens = input.reduce((sum, s) => sum + s.length, 0);
    let chosen = 0;
    let masked = 0;
    let randomised = 0;
    let kept = 0;
    batch.labels.forEach((label, i) => {
      if (label < 0) return;
      chosen++;
      const id = batch.inputIds[i] ?? -1;
      if (id === SPECIALS.mask) masked++;
      else if (id === label) kept++;
      else {
        randomised++;
        expect(id).toBeGreaterThanOrEqual(5);
        expect(id).toBeLessThan(VOCAB);
      }
    });
    expect(tokens).toBeGreaterThan(5000);
    expect(chosen / tokens).toBeGreaterThan(0.13);
    expect(chosen / tokens).toBeLessThan(0.18);
    expect(masked / chosen).toBeGreaterThan(0.75);
    expect(masked / chosen).toBeLessThan(0.85);
    expect(randomised / chosen).toBeGreaterThan(0.06);
    expect(randomised / chosen).toBeLessThan(0.14);
    expect(kept / chosen).toBeGreaterThan(0.06);
    expect(kept / chosen).toBeLessThan(0.14);
  });

  it("replaces with ordinary tokens only, never a special one", () => {
    const tiny = new MaskedTokenBatcher({
      sequenceLength: 32,
      maskProbability: 0.5,
      vocabSize: 8,
      specialTokens: SPECIALS,
      random: new SeededRandom(2),
    });
    const input = Array.from({ length: 200 }, (_, r) =>
      Uint16Array.from({ length: 30 }, (_, c) => 5 + ((r + c) % 3)),
    );
    const batch = tiny.batch(input);
    let randomised = 0;
    batch.labels.forEach((label, i) => {
      const id = batch.inputIds[i] ?? -1;
      if (label < 0 || id === SPECIALS.mask) return;
      expect(id).toBeGreaterThanOrEqual(5);
      expect(id).toBeLessThan(8);
      if (id !== label) randomised++;
    });
    expect(randomised).toBeGreaterThan(100);
  });

  it("is deterministic for a seed and differs between seeds", () => {
    const input = sentences(50, 1);
    expect(batcher(16, 3).batch(input)).toEqual(batcher(16, 3).batch(input));
    expect(batcher(16, 4).batch(input).labels).not.toEqual(batcher(16, 3).batch(input).labels);
  });

  it("refuses unusable settings", () => {
    expect(() => batcher(2, 0)).toThrow(/sequenceLength/);
    expect(() => batcher(8, 0, 1)).toThrow(/maskProbability/);
    expect(
      () =>
        new MaskedTokenBatcher({
          sequenceLength: 8,
          maskProbability: 0.15,
          vocabSize: 5,
          specialTokens: SPECIALS,
          random: new SeededRandom(0),
        }),
    ).toThrow(/no ordinary tokens/);
  });
});
