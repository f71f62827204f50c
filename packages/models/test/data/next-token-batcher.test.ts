import { describe, expect, it } from "vitest";
import { nextTokenBatch } from "../../src/data/next-token-batcher.ts";
import { SPECIALS } from "./dataset-fixture.ts";

const { pad: PAD, cls: CLS, sep: SEP } = SPECIALS;

describe("nextTokenBatch", () => {
  it("labels each position with the id after it, [SEP] after the last token, and nothing past the sentence", () => {
    const batch = nextTokenBatch([Uint16Array.of(10, 11, 12)], 6, SPECIALS);
    expect(batch).toMatchObject({ kind: "next-tokens", size: 1, sequenceLength: 6 });
    expect([...batch.inputIds]).toEqual([CLS, 10, 11, 12, PAD, PAD]);
    expect([...batch.labels]).toEqual([10, 11, 12, SEP, -1, -1]);
    expect([...batch.attentionMask]).toEqual([1, 1, 1, 1, 0, 0]);
  });

  it("cuts a long sentence to the row, predicting every id the row reads after [CLS]", () => {
    const batch = nextTokenBatch([Uint16Array.of(10, 11, 12, 13, 14), Uint16Array.of(20)], 4, SPECIALS);
    expect([...batch.inputIds]).toEqual([CLS, 10, 11, 12, CLS, 20, PAD, PAD]);
    expect([...batch.labels]).toEqual([10, 11, 12, 13, 20, SEP, -1, -1]);
    expect([...batch.attentionMask]).toEqual([1, 1, 1, 1, 1, 1, 0, 0]);
  });

  it("fills a row exactly when the sentence and [SEP] just fit", () => {
    const batch = nextTokenBatch([Uint16Array.of(10, 11, 12)], 4, SPECIALS);
    expect([...batch.inputIds]).toEqual([CLS, 10, 11, 12]);
    expect([...batch.labels]).toEqual([10, 11, 12, SEP]);
  });

  it("refuses a row length that is not a positive integer", () => {
    expect(() => nextTokenBatch([], 0, SPECIALS)).toThrow(RangeError);
    expect(() => nextTokenBatch([], 2.5, SPECIALS)).toThrow(RangeError);
  });
});
