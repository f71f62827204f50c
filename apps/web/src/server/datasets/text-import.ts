import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import {
  DATASET_FORMAT_VERSION,
  SPECIAL_TOKENS,
  type DatasetShard,
  type TokenManifest,
} from "../../api/schemas/datasets.ts";
import {
  DEFAULT_VOCAB_SIZE,
  encodeSentence,
  rankVocabulary,
  writeVocabulary,
} from "./brown-corpus-source.ts";
import { summarizeSplits, writeManifestFile } from "./manifest.ts";
import { ShardWriter } from "./shard-writer.ts";
import type { ImportProgress } from "./uploaded-dataset.ts";

/**
 * Converts a plain-text file (UTF-8) into a `tokens-u16le` dataset with the word vocabulary the
 * Brown corpus uses: lower-cased words and punctuation marks, the most frequent `vocabSize` tokens
 * (special tokens included), every other word [UNK]. The masked-LM preset trains on it.
 *
 * Rules (the datasets README has them for organizers):
 * - Each non-blank line is a record (a sentence or a paragraph); a line of more than
 *   MAX_RECORD_WORDS tokens is cut into records of at most that many.
 * - Tokens: runs of letters and digits (with inner apostrophes: "don't"), and each other
 *   non-space character on its own, all lower-cased.
 * - Record r (0-based) goes to the test split when r % TEXT_TEST_EVERY is TEXT_TEST_EVERY − 1; the
 *   vocabulary is counted over the train records only.
 * - The file is read twice, streaming: once to count words, once to encode. Only the word counts
 *   stay in memory; past MAX_COUNTED_WORDS distinct words, the rarest are dropped from the count
 *   (they would not make a vocabulary of at most 65,536 tokens anyway).
 * - Refused, with the line: bytes that are not UTF-8, a NUL byte (a binary file), a line longer
 *   than MAX_LINE_BYTES; and a file with no words.
 */

export const TEXT_TEST_EVERY = 20;
/** The most tokens in one record; longer lines are cut. */
export const MAX_RECORD_WORDS = 512;
/** The longest line accepted, in bytes. */
export const MAX_LINE_BYTES = 1 << 20;
const NEWLINE = 0x0a;
/** Distinct words counted before the rare ones are dropped. */
const MAX_COUNTED_WORDS = 2_000_000;
const MAX_VOCAB_SIZE = 0x10000;
export const TEXT_RECORDS_PER_SHARD = 5000;
const PROGRESS_EVERY_BYTES = 1 << 20;
const WORD = /[\p{L}\p{N}]+(?:['’][\p{L}\p{N}]+)*|[^\s\p{L}\p{N}]/gu;

export { DEFAULT_VOCAB_SIZE };

export class TextImportError extends Error {
  override readonly name = "TextImportError";
  /** The 1-based line of the file the problem is on, when it is on one. */
  readonly line: number | undefined;

  constructor(message: string, line?: number) {
    super(message);
    this.line = line;
  }
}

export interface TextConversionOptions {
  readonly source: string;
  /** An empty directory to write the shards, vocabulary and manifest into. */
  readonly dir: string;
  readonly name: string;
  readonly fileName: string;
  /** Tokens in the vocabulary, special tokens included; DEFAULT_VOCAB_SIZE when undefined. */
  readonly vocabSize?: number | undefined;
  readonly recordsPerShard?: number;
  /** Progress over both passes: `bytesRead` runs to twice the file's size. */
  readonly onProgress?: (progress: ImportProgress) => void;
  readonly signal?: AbortSignal;
}

/** The tokens of one line of text. */
export function textWords(line: string): string[] {
  return (line.toLowerCase().match(WORD) ?? []) as string[];
}

/** Converts the text file into shards, `vocab.txt` and a manifest in `options.dir`. Deterministic. */
export async function convertText(options: TextConversionOptions): Promise<TokenManifest> {
  const vocabSize = options.vocabSize ?? DEFAULT_VOCAB_SIZE;
  if (!Number.isSafeInteger(vocabSize) || vocabSize <= SPECIAL_TOKENS.length || vocabSize > MAX_VOCAB_SIZE) {
    throw new TextImportError(
      `the vocabulary size must be a whole number from ${SPECIAL_TOKENS.length + 1} to ${MAX_VOCAB_SIZE}`,
    );
  }
  // Pass 1: count the train records' words, and hash the file.
  const counts = new Map<string, number>();
  const hash = createHash("sha256");
  let records = 0;
  const fileBytes = await forEachRecord(options, 0, hash, (words, split) => {
    records += 1;
    if (split !== "train") return;
    for (const word of words) counts.set(word, (counts.get(word) ?? 0) + 1);
    if (counts.size > MAX_COUNTED_WORDS) dropRareWords(counts);
  });
  if (records === 0) throw new TextImportError("the file holds no words");
  const vocabulary = rankVocabulary(counts, vocabSize);
  counts.clear();
  const ids = new Map(vocabulary.map((token, id) => [token, id]));
  const vocabularyEntry = await writeVocabulary(options.dir, vocabulary);

  // Pass 2: encode every record.
  const recordsPerShard = options.recordsPerShard ?? TEXT_RECORDS_PER_SHARD;
  const writers = {
    train: new ShardWriter({ dir: options.dir, split: "train", recordsPerShard }),
    test: new ShardWriter({ dir: options.dir, split: "test", recordsPerShard }),
  };
  let maxTokens = 0;
  let written = 0;
  const pending: { split: "train" | "test"; record: Uint8Array }[] = [];
  try {
    await forEachRecord(
      options,
      fileBytes,
      undefined,
      (words, split) => {
        maxTokens = Math.max(maxTokens, words.length);
        pending.push({ split, record: encodeSentence(words, ids) });
      },
      async () => {
        for (const { split, record } of pending.splice(0)) {
          await writers[split].write(record);
          written += 1;
        }
      },
      () => written,
    );
  } catch (error) {
    await Promise.all([writers.train.abort(), writers.test.abort()]);
    throw error;
  }
  const shards: DatasetShard[] = [...(await writers.train.finish()), ...(await writers.test.finish())];
  options.onProgress?.({ bytesRead: 2 * fileBytes, records: written });
  const fileName = options.fileName.slice(0, 255) || "upload.txt";
  const manifest: TokenManifest = {
    name: options.name,
    formatVersion: DATASET_FORMAT_VERSION,
    format: "tokens-u16le",
    description: `Imported from ${fileName}: ${written} lines of text as lower-cased word ids (${vocabulary.length} tokens)`,
    createdFrom: { upload: fileName, bytes: fileBytes, sha256: hash.digest("hex") },
    options: { recordsPerShard, limit: null, vocabSize },
    splits: summarizeSplits(shards),
    shards,
    record: { length: "uint16le", token: "uint16le", maxTokens },
    vocabulary: vocabularyEntry,
  };
  await writeManifestFile(options.dir, manifest);
  return manifest;
}

/** Drops the rarest words (seen once, then twice, …) until at most half of MAX_COUNTED_WORDS are left. */
function dropRareWords(counts: Map<string, number>): void {
  for (let atMost = 1; counts.size > MAX_COUNTED_WORDS / 2; atMost += 1) {
    for (const [word, count] of counts) if (count <= atMost) counts.delete(word);
  }
}

/**
 * Reads the file line by line, strictly as UTF-8, and calls `each` with every record's words and
 * split, in order; `drain` (awaited) after each chunk of the file. Resolves with the file's size.
 */
async function forEachRecord(
  options: TextConversionOptions,
  progressBase: number,
  hash: ReturnType<typeof createHash> | undefined,
  each: (words: string[], split: "train" | "test") => void,
  drain?: () => Promise<void>,
  recordsDone?: () => number,
): Promise<number> {
  const { signal } = options;
  const decoder = new TextDecoder("utf-8", { fatal: true });
  let line = 1;
  let carry: Buffer[] = [];
  let carried = 0;
  let bytes = 0;
  let record = 0;
  let nextProgress = PROGRESS_EVERY_BYTES;
  // A line's bytes are decoded on their own: a newline byte is never inside a UTF-8 sequence.
  const emitLine = (raw: Buffer) => {
    if (raw.byteLength > MAX_LINE_BYTES) throw tooLong(line);
    let text: string;
    try {
      text = decoder.decode(raw);
    } catch {
      throw new TextImportError(
        `line ${line}: the file is not UTF-8 text (save it as UTF-8 and upload it again)`,
        line,
      );
    }
    if (text.includes("\0")) {
      throw new TextImportError(`line ${line} holds a NUL byte: the file is not plain text`, line);
    }
    const words = textWords(text.endsWith("\r") ? text.slice(0, -1) : text);
    for (let start = 0; start < words.length; start += MAX_RECORD_WORDS) {
      const split = record % TEXT_TEST_EVERY === TEXT_TEST_EVERY - 1 ? "test" : "train";
      each(words.slice(start, start + MAX_RECORD_WORDS), split);
      record += 1;
    }
    line += 1;
  };
  for await (const chunk of createReadStream(options.source, { highWaterMark: 1 << 16, signal })) {
    const buffer = chunk as Buffer;
    hash?.update(buffer);
    bytes += buffer.byteLength;
    let from = 0;
    for (let end = buffer.indexOf(NEWLINE); end >= 0; end = buffer.indexOf(NEWLINE, from)) {
      const piece = buffer.subarray(from, end);
      emitLine(carried === 0 ? piece : Buffer.concat([...carry, piece]));
      carry = [];
      carried = 0;
      from = end + 1;
    }
    if (from < buffer.byteLength) {
      carry.push(buffer.subarray(from));
      carried += buffer.byteLength - from;
      if (carried > MAX_LINE_BYTES) throw tooLong(line);
    }
    await drain?.();
    if (bytes >= nextProgress) {
      nextProgress = bytes + PROGRESS_EVERY_BYTES;
      options.onProgress?.({ bytesRead: progressBase + bytes, records: recordsDone?.() ?? 0 });
    }
  }
  if (carried > 0) emitLine(Buffer.concat(carry));
  await drain?.();
  return bytes;
}

function tooLong(line: number): TextImportError {
  return new TextImportError(
    `line ${line} is longer than ${MAX_LINE_BYTES / 1024 / 1024} MiB; put one sentence or paragraph on each line`,
    line,
  );
}
