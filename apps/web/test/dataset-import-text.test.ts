import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { datasetManifestSchema, type TokenManifest } from "../src/api/schemas/datasets.ts";
import {
  convertText,
  MAX_RECORD_WORDS,
  TextImportError,
  textWords,
  type TextConversionOptions,
} from "../src/server/datasets/text-import.ts";

/**
 * Plain text → `tokens-u16le`: the vocabulary (train lines only, most frequent first), each line's
 * ids read back from the shards, long lines cut, and every refusal with its line.
 */

let dir: string;
let counter = 0;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "text-import-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function convert(text: string | Uint8Array, options: Partial<TextConversionOptions> = {}) {
  counter += 1;
  const source = join(dir, `text-${counter}.txt`);
  const out = join(dir, `out-${counter}`);
  await writeFile(source, text);
  await mkdir(out);
  const manifest = await convertText({
    source,
    dir: out,
    name: "stories",
    fileName: "stories.txt",
    ...options,
  });
  return { manifest, out };
}

async function refusal(text: string | Uint8Array): Promise<TextImportError> {
  const error = await convert(text).then(
    () => undefined,
    (thrown: unknown) => thrown,
  );
  expect(error).toBeInstanceOf(TextImportError);
  return error as TextImportError;
}

/** Every record of a split, as token ids. */
async function records(out: string, manifest: TokenManifest, split: "train" | "test"): Promise<number[][]> {
  const rows: number[][] = [];
  for (const shard of manifest.shards.filter((entry) => entry.split === split)) {
    const data = await readFile(join(out, shard.file));
    for (let at = 0; at < data.byteLength;) {
      const length = data.readUInt16LE(at);
      rows.push(Array.from({ length }, (_, i) => data.readUInt16LE(at + 2 + 2 * i)));
      at += 2 + 2 * length;
    }
  }
  return rows;
}

describe("text import", () => {
  it("splits words and punctuation, lower-cased", () => {
    expect(textWords("Don't panic, Arthur — it's 42!")).toEqual([
      "don't",
      "panic",
      ",",
      "arthur",
      "—",
      "it's",
      "42",
      "!",
    ]);
    expect(textWords("   ")).toEqual([]);
  });

  it("encodes each line with a vocabulary of the train lines' most frequent words", async () => {
    // 40 lines: line 20 and 40 (records 19 and 39) are test. "zebra" is only in test lines.
    const lines = Array.from({ length: 40 }, (_, i) =>
      (i + 1) % 20 === 0 ? "The zebra sleeps." : i % 2 === 0 ? "The cat sat." : "The dog ran, the cat sat.",
    );
    const text = `\uFEFF${lines.join("\r\n")}\n\n`;
    const { manifest, out } = await convert(text, { vocabSize: 12, recordsPerShard: 16 });
    expect(datasetManifestSchema.parse(manifest)).toEqual(manifest);
    const vocabulary = (await readFile(join(out, "vocab.txt"), "utf8")).split("\n").slice(0, -1);
    // "the" 56, then "." "cat" "sat" 38 each, then "," "dog" "ran" 18 each: ties in code-unit order.
    expect(vocabulary).toEqual([
      "[PAD]",
      "[UNK]",
      "[CLS]",
      "[SEP]",
      "[MASK]",
      "the",
      ".",
      "cat",
      "sat",
      ",",
      "dog",
      "ran",
    ]);
    expect(manifest.vocabulary.size).toBe(12);
    expect(manifest.splits).toMatchObject({ train: { records: 38 }, test: { records: 2 } });
    expect(manifest.record.maxTokens).toBe(8);
    const train = await records(out, manifest, "train");
    expect(train[0]).toEqual([5, 7, 8, 6]);
    expect(train[1]).toEqual([5, 10, 11, 9, 5, 7, 8, 6]);
    // An unknown word is [UNK].
    expect(await records(out, manifest, "test")).toEqual([
      [5, 1, 1, 6],
      [5, 1, 1, 6],
    ]);
  });

  it("cuts a line longer than MAX_RECORD_WORDS into records", async () => {
    const long = Array.from({ length: MAX_RECORD_WORDS + 10 }, () => "word").join(" ");
    const { manifest, out } = await convert(`${long}\nshort line\n`);
    expect(manifest.splits.train.records).toBe(3);
    const lengths = (await records(out, manifest, "train")).map((row) => row.length);
    expect(lengths).toEqual([MAX_RECORD_WORDS, 10, 2]);
  });

  it("reports progress over both passes", async () => {
    const text = "a b c\n".repeat(400_000);
    const seen: number[] = [];
    await convert(text, { onProgress: ({ bytesRead }) => seen.push(bytesRead) });
    expect(seen.at(-1)).toBe(2 * Buffer.byteLength(text));
    expect(seen.some((bytes) => bytes < Buffer.byteLength(text))).toBe(true);
  });

  describe("refusals", () => {
    it("bytes that are not UTF-8, with the line", async () => {
      const bytes = Buffer.concat([
        Buffer.from("fine\nstill fine\nbad "),
        Buffer.from([0xc3, 0x28]),
        Buffer.from("\n"),
      ]);
      const error = await refusal(bytes);
      expect(error.message).toBe("line 3: the file is not UTF-8 text (save it as UTF-8 and upload it again)");
      expect(error.line).toBe(3);
    });

    it("a binary file", async () => {
      expect((await refusal("text\nmore\0binary\n")).message).toBe(
        "line 2 holds a NUL byte: the file is not plain text",
      );
    });

    it("an empty file, or one with no words", async () => {
      expect((await refusal("")).message).toBe("the file holds no words");
      expect((await refusal("\n  \n\t\n")).message).toBe("the file holds no words");
    });

    it("a line longer than the limit", async () => {
      const error = await refusal(`ok\n${"x".repeat((1 << 20) + 10)}\n`);
      expect(error.message).toBe("line 2 is longer than 1 MiB; put one sentence or paragraph on each line");
    });
  });
});
