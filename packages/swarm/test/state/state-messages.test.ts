import { describe, expect, it } from "vitest";
import { MAX_HEAD_BYTES, decodeMessage, encodeMessage } from "../../src/rpc/codec.ts";
import {
  MAX_STATE_CHUNKS,
  MAX_STATE_CHUNK_BYTES,
  stateChunksRequestSchema,
  stateManifestSchema,
} from "../../src/state/state-messages.ts";

const hash = (fill: number): Uint8Array => new Uint8Array(32).fill(fill);

const manifest = {
  epoch: 4,
  totalBytes: 2500,
  chunkBytes: 1000,
  root: hash(9),
  chunkHashes: [hash(1), hash(2), hash(3)],
};

function decodeManifest(value: unknown) {
  return decodeMessage(encodeMessage(value), stateManifestSchema, "manifest");
}

describe("state-sharing messages", () => {
  it("accepts a consistent manifest and one at the largest size within the head cap", () => {
    expect(decodeManifest(manifest)).toEqual(manifest);
    const largest = {
      epoch: Number.MAX_SAFE_INTEGER,
      totalBytes: MAX_STATE_CHUNKS * MAX_STATE_CHUNK_BYTES,
      chunkBytes: MAX_STATE_CHUNK_BYTES,
      root: hash(0),
      chunkHashes: Array.from({ length: MAX_STATE_CHUNKS }, (_, i) => hash(i % 256)),
    };
    expect(encodeMessage(largest).length).toBeLessThan(MAX_HEAD_BYTES);
    expect(decodeManifest(largest).chunkHashes).toHaveLength(MAX_STATE_CHUNKS);
  });

  it("refuses manifests that break the caps or do not add up", () => {
    const bad: Array<[string, unknown]> = [
      ["too few hashes for totalBytes", { ...manifest, totalBytes: 3001 }],
      ["too many hashes for totalBytes", { ...manifest, totalBytes: 2000 }],
      ["short hash", { ...manifest, chunkHashes: [hash(1), hash(2), new Uint8Array(31)] }],
      ["short root", { ...manifest, root: new Uint8Array(33) }],
      ["hash as a string", { ...manifest, root: "00".repeat(32) }],
      [
        "chunk over 4 MiB",
        {
          ...manifest,
          totalBytes: MAX_STATE_CHUNK_BYTES + 1,
          chunkBytes: MAX_STATE_CHUNK_BYTES + 1,
          chunkHashes: [hash(1)],
        },
      ],
      ["no chunks", { ...manifest, totalBytes: 0, chunkHashes: [] }],
      [
        "too many chunks",
        {
          ...manifest,
          totalBytes: MAX_STATE_CHUNKS + 1,
          chunkBytes: 1,
          chunkHashes: Array.from({ length: MAX_STATE_CHUNKS + 1 }, () => hash(1)),
        },
      ],
      ["negative epoch", { ...manifest, epoch: -1 }],
      ["extra field", { ...manifest, extra: true }],
    ];
    for (const [what, value] of bad) {
      expect(() => decodeManifest(value), what).toThrow(
        expect.objectContaining({ code: "MALFORMED_MESSAGE" }),
      );
    }
  });

  it("refuses chunk ranges that are empty, reversed or past the cap", () => {
    const request = { epoch: 1, root: hash(1), fromChunk: 0, toChunk: 2 };
    const parse = (value: unknown) =>
      decodeMessage(encodeMessage(value), stateChunksRequestSchema, "request");
    expect(parse(request)).toEqual(request);
    for (const range of [
      { fromChunk: 2, toChunk: 2 },
      { fromChunk: 3, toChunk: 2 },
      { fromChunk: 0, toChunk: MAX_STATE_CHUNKS + 1 },
      { fromChunk: -1, toChunk: 2 },
      { fromChunk: 0.5, toChunk: 2 },
    ]) {
      expect(() => parse({ ...request, ...range }), JSON.stringify(range)).toThrow(
        expect.objectContaining({ code: "MALFORMED_MESSAGE" }),
      );
    }
  });
});
