import { describe, expect, it } from "vitest";
import { DatasetErrorCode, isDatasetError } from "../../src/data/dataset-error.ts";
import { decodeTokenShard } from "../../src/data/token-decoder.ts";
import { SPECIALS, tokenRecord } from "./dataset-fixture.ts";

const rules = { vocabSize: 100, specialTokens: SPECIALS };

function concat(...parts: (Uint8Array | number[])[]): Uint8Array {
  return new Uint8Array(Buffer.concat(parts.map((part) => Uint8Array.from(part))));
}

function malformed(run: () => unknown): string {
  try {
    run();
  } catch (error) {
    expect(isDatasetError(error, DatasetErrorCode.SHARD_MALFORMED)).toBe(true);
    return String(error);
  }
  throw new Error("expected SHARD_MALFORMED, but the shard was accepted");
}

describe("decodeTokenShard", () => {
  it("walks the records, [UNK] included", () => {
    const shard = concat(tokenRecord([5, 6, 7]), tokenRecord([SPECIALS.unk]), tokenRecord([99, 8]));
    const sentences = decodeTokenShard(shard, "f", { ...rules, expectedRecords: 3 });
    expect(sentences.map((s) => [...s])).toEqual([[5, 6, 7], [1], [99, 8]]);
    expect(decodeTokenShard(new Uint8Array(0), "f", rules)).toEqual([]);
  });

  it("reads correctly from an odd byte offset (copying)", () => {
    const padded = concat([0xff], tokenRecord([5, 300]));
    const sentences = decodeTokenShard(padded.subarray(1), "f", { ...rules, vocabSize: 1000 });
    expect(sentences.map((s) => [...s])).toEqual([[5, 300]]);
  });

  it("refuses a record running past the end", () => {
    const shard = concat(tokenRecord([5, 6]), [3, 0, 5, 0]);
    expect(malformed(() => decodeTokenShard(shard, "f", rules))).toMatch(/claims 3 tokens but only 1 remain/);
    expect(malformed(() => decodeTokenShard(concat(tokenRecord([5]), [1]), "f", rules))).toMatch(
      /odd length/,
    );
  });

  it("refuses n = 0", () => {
    expect(malformed(() => decodeTokenShard(concat(tokenRecord([5]), [0, 0]), "f", rules))).toMatch(
      /record 1 at byte 4 has 0 tokens/,
    );
  });

  it("refuses ids ≥ the vocabulary size and specials other than [UNK]", () => {
    expect(malformed(() => decodeTokenShard(tokenRecord([5, 100]), "f", rules))).toMatch(
      /token id 100 .* not below the vocabulary size 100/,
    );
    for (const special of [SPECIALS.pad, SPECIALS.cls, SPECIALS.sep, SPECIALS.mask]) {
      expect(malformed(() => decodeTokenShard(tokenRecord([5, special]), "f", rules))).toMatch(
        /special token/,
      );
    }
  });

  it("refuses a record count that differs from the manifest", () => {
    expect(
      malformed(() => decodeTokenShard(tokenRecord([5]), "f", { ...rules, expectedRecords: 2 })),
    ).toMatch(/holds 1 records, the manifest says 2/);
  });
});
