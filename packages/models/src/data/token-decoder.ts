import type { TokenManifest } from "@barnraise/protocol";
import { DatasetError, DatasetErrorCode } from "./dataset-error.ts";

/** The special token ids of a `tokens-u16le` vocabulary. */
export type SpecialTokens = TokenManifest["vocabulary"]["specialTokens"];

/** What a token shard is checked against. */
export interface TokenShardRules {
  /** Ids must be below this (the manifest's `vocabulary.size`). */
  readonly vocabSize: number;
  /** Shards never hold [PAD], [CLS], [SEP] or [MASK]; the batcher adds them. [UNK] is allowed. */
  readonly specialTokens: SpecialTokens;
  /** The manifest's record count for this shard, when known. */
  readonly expectedRecords?: number;
}

const littleEndian = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/**
 * Walks a `tokens-u16le` shard (`n`, then `n` ids, repeated to the exact end) and returns one
 * Uint16Array per sentence, each its own copy (so a sentence waiting in the shuffle buffer does not
 * keep its whole shard in memory). Refuses n = 0, a record running past the end, an id ≥ vocabSize,
 * a special other than [UNK], and a record count differing from the manifest.
 */
export function decodeTokenShard(bytes: Uint8Array, file: string, rules: TokenShardRules): Uint16Array[] {
  if (bytes.byteLength % 2 !== 0)
    throw malformed(file, `odd length ${bytes.byteLength}: it holds uint16 values only`);
  const words = toUint16(bytes);
  const { pad, cls, sep, mask } = rules.specialTokens;
  const sentences: Uint16Array[] = [];
  let at = 0;
  while (at < words.length) {
    const n = words[at] ?? 0;
    if (n === 0) throw malformed(file, `record ${sentences.length} at byte ${2 * at} has 0 tokens`);
    const end = at + 1 + n;
    if (end > words.length) {
      throw malformed(
        file,
        `record ${sentences.length} at byte ${2 * at} claims ${n} tokens but only ${words.length - at - 1} remain`,
      );
    }
    for (let i = at + 1; i < end; i++) {
      const id = words[i] ?? 0;
      if (id >= rules.vocabSize || id === pad || id === cls || id === sep || id === mask) {
        const why =
          id >= rules.vocabSize
            ? `is not below the vocabulary size ${rules.vocabSize}`
            : "is a special token";
        throw malformed(file, `record ${sentences.length} has token id ${id} at byte ${2 * i}, which ${why}`);
      }
    }
    sentences.push(words.slice(at + 1, end));
    at = end;
  }
  if (rules.expectedRecords !== undefined && sentences.length !== rules.expectedRecords) {
    throw malformed(file, `it holds ${sentences.length} records, the manifest says ${rules.expectedRecords}`);
  }
  return sentences;
}

function toUint16(bytes: Uint8Array): Uint16Array {
  if (littleEndian && bytes.byteOffset % 2 === 0) {
    return new Uint16Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 2);
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const words = new Uint16Array(bytes.byteLength / 2);
  for (let i = 0; i < words.length; i++) words[i] = view.getUint16(2 * i, true);
  return words;
}

function malformed(file: string, what: string): DatasetError {
  return new DatasetError(DatasetErrorCode.SHARD_MALFORMED, `token shard ${file} is malformed: ${what}`);
}
