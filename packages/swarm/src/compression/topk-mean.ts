import { topkCodec } from "./topk.ts";
import {
  allocateEncoded,
  CODEC_IDS,
  decodeWire,
  expectBodySize,
  HEADER_BYTES,
  malformed,
  viewOf,
  type CodecDecoder,
} from "./wire.ts";

/** One contribution to a topk mean: its topk encoding, whole, and the weight the mean gives it. */
export interface TopkMeanEntry {
  readonly bytes: Uint8Array;
  readonly weight: number;
}

/** Before the entries: uint16 entry count. Per entry: float64 weight, uint32 byte length. */
const COUNT_BYTES = 2;
const ENTRY_HEADER_BYTES = 12;
const MAX_ENTRIES = 0xffff;

const topkDecoder: readonly CodecDecoder[] = [topkCodec()];

/** Whether `bytes` (a whole encoding) are in the topk codec: only those can be a topk mean's entries. */
export function isTopkEncoding(bytes: Uint8Array): boolean {
  return bytes.length >= HEADER_BYTES && bytes[1] === CODEC_IDS.topk;
}

/** Encoded size of a topk mean of `entries` (with the common header), to compare before encoding. */
export function topkMeanBytes(entries: readonly TopkMeanEntry[]): number {
  return entries.reduce(
    (bytes, entry) => bytes + ENTRY_HEADER_BYTES + entry.bytes.length,
    HEADER_BYTES + COUNT_BYTES,
  );
}

/**
 * A topk round's averaged chunk, sent as the contributions themselves: every member's topk bytes
 * as it sent them, with the weight the mean gives it. The mean of k-sparse contributions is nonzero
 * on the union of their supports, so sending it takes an index and a value per nonzero of the
 * union; the contributions take their Rice-coded positions and 2-bit values each, about half of
 * that at 1.5 % and four members (the all-gather SparseLoCo runs, through the reducer). The
 * receiver, and the reducer itself, decode the same bytes into the same mean: Σ w·x / Σ w per
 * element, in float64 in entry order, rounded to float32.
 *
 * Layout after the common header: uint16 m (1 … 65,535), then per entry: float64 weight (finite,
 * > 0), uint32 n, n bytes: a whole topk encoding (header included) of the same element count.
 * Refuses anything else with MALFORMED_MESSAGE.
 */
export function encodeTopkMean(entries: readonly TopkMeanEntry[], count: number): Uint8Array {
  if (entries.length === 0 || entries.length > MAX_ENTRIES) {
    throw malformed(`a topk mean holds 1 … ${MAX_ENTRIES} entries, not ${entries.length}`);
  }
  const out = allocateEncoded("topk-mean", count, topkMeanBytes(entries) - HEADER_BYTES);
  const view = viewOf(out);
  view.setUint16(HEADER_BYTES, entries.length, true);
  let at = HEADER_BYTES + COUNT_BYTES;
  for (const { bytes, weight } of entries) {
    if (!(Number.isFinite(weight) && weight > 0)) throw malformed(`a topk mean entry has weight ${weight}`);
    view.setFloat64(at, weight, true);
    view.setUint32(at + 8, bytes.length, true);
    out.set(bytes, at + ENTRY_HEADER_BYTES);
    at += ENTRY_HEADER_BYTES + bytes.length;
  }
  return out;
}

export const topkMeanDecoder: CodecDecoder = Object.freeze({
  name: "topk-mean" as const,

  decode(body: Uint8Array, count: number): Float32Array {
    if (body.length < COUNT_BYTES)
      throw malformed(`topk-mean body is truncated: ${body.length} bytes, no count`);
    const view = viewOf(body);
    const entries = view.getUint16(0, true);
    if (entries === 0) throw malformed("topk-mean holds no entry");
    const sum = new Float64Array(count);
    let total = 0;
    let at = COUNT_BYTES;
    for (let e = 0; e < entries; e++) {
      if (at + ENTRY_HEADER_BYTES > body.length) {
        throw malformed(`topk-mean body is truncated: ${body.length} bytes end inside entry ${e}`);
      }
      const weight = view.getFloat64(at, true);
      if (!(Number.isFinite(weight) && weight > 0))
        throw malformed(`topk-mean entry ${e} has weight ${weight}`);
      const length = view.getUint32(at + 8, true);
      const start = at + ENTRY_HEADER_BYTES;
      if (start + length > body.length) {
        throw malformed(`topk-mean body is truncated: ${body.length} bytes end inside entry ${e}`);
      }
      const values = decodeWire(body.subarray(start, start + length), count, topkDecoder);
      for (let i = 0; i < count; i++) sum[i] = (sum[i] ?? 0) + weight * (values[i] ?? 0);
      total += weight;
      at = start + length;
    }
    expectBodySize("topk-mean", body, at);
    const mean = new Float32Array(count);
    for (let i = 0; i < count; i++) mean[i] = (sum[i] ?? 0) / total;
    return mean;
  },
});
