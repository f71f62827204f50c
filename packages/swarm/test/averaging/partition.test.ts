import { describe, expect, it } from "vitest";
import { blockwise8Codec } from "../../src/compression/blockwise8.ts";
import { fp16Codec } from "../../src/compression/fp16.ts";
import { compressorFor } from "../../src/compression/index.ts";
import { noneCodec } from "../../src/compression/none.ts";
import { quantile8Codec } from "../../src/compression/quantile8.ts";
import {
  chunkElementsFor,
  MAX_CHUNK_ELEMENTS,
  chunkRanges,
  partRanges,
  planRound,
  type AllReduceGroup,
} from "../../src/averaging/partition.ts";

function group(members: AllReduceGroup["members"]): AllReduceGroup {
  return { groupId: "g", members, fractions: members.map(() => 1 / members.length) };
}

describe("partRanges", () => {
  it("lays parts out contiguously, empty parts included", () => {
    expect(partRanges(10, [3, 0, 7])).toEqual([
      { start: 0, end: 3 },
      { start: 3, end: 3 },
      { start: 3, end: 10 },
    ]);
  });

  it("refuses counts that do not cover the vector or are not integers", () => {
    expect(() => partRanges(10, [3, 6])).toThrow(/sum to 9/);
    expect(() => partRanges(10, [3, 8])).toThrow(expect.objectContaining({ code: "LENGTH_MISMATCH" }));
    expect(() => partRanges(3, [1.5, 1.5])).toThrow(expect.objectContaining({ code: "LENGTH_MISMATCH" }));
    expect(() => partRanges(3, [-1, 4])).toThrow(expect.objectContaining({ code: "LENGTH_MISMATCH" }));
  });
});

describe("chunkRanges", () => {
  it("splits a range into full chunks and a shorter last one", () => {
    expect(chunkRanges(5, 15, 4)).toEqual([
      { start: 5, end: 9 },
      { start: 9, end: 13 },
      { start: 13, end: 15 },
    ]);
    expect(chunkRanges(5, 5, 4)).toEqual([]);
    expect(chunkRanges(0, 8, 4)).toHaveLength(2);
  });

  it("refuses a non-positive chunk size", () => {
    expect(() => chunkRanges(0, 8, 0)).toThrow(expect.objectContaining({ code: "LENGTH_MISMATCH" }));
  });

  it("sizes chunks by encoded payload bytes, at least one element and at most the head's limit", () => {
    expect(chunkElementsFor(8 << 10, noneCodec)).toBe(2048);
    expect(chunkElementsFor(8 << 10, fp16Codec)).toBe(4096);
    // Two whole 4,096-element blocks: the per-block scales are not counted.
    expect(chunkElementsFor(8 << 10, blockwise8Codec)).toBe(8192);
    expect(chunkElementsFor(8 << 10, compressorFor("adaptive", 1 << 20))).toBe(8192);
    expect(chunkElementsFor(8 << 10, compressorFor("adaptive", 1000))).toBe(4096);
    expect(chunkElementsFor(10, noneCodec)).toBe(2);
    expect(chunkElementsFor(1, noneCodec)).toBe(1);
    expect(chunkElementsFor(64 << 20, quantile8Codec)).toBe(MAX_CHUNK_ELEMENTS);
  });
});

describe("planRound", () => {
  const members = [
    { peerId: "a", mode: "node", weight: 3 },
    { peerId: "b", mode: "client", weight: 2 },
    { peerId: "c", mode: "aux", weight: 0 },
    { peerId: "d", mode: "node", weight: 0 },
  ] as const;

  it("derives participants (non-aux) and contributors (positive weight)", () => {
    const plan = planRound(group(members), [4, 0, 4, 2], 10, "d");
    expect(plan.selfIndex).toBe(3);
    expect([...plan.participants]).toEqual([0, 1, 3]);
    expect([...plan.contributors]).toEqual([0, 1]);
    expect(plan.parts[2]).toEqual({ start: 4, end: 8 });
  });

  it("lets clients reduce only in a group of clients (through their relays)", () => {
    const clients = [
      { peerId: "a", weight: 2, mode: "client" as const },
      { peerId: "b", weight: 3, mode: "client" as const },
    ];
    const plan = planRound(group(clients), [5, 5], 10, "a");
    expect(plan.parts).toEqual([
      { start: 0, end: 5 },
      { start: 5, end: 10 },
    ]);
    expect([...plan.contributors]).toEqual([0, 1]);
  });

  it("refuses groups that cannot run", () => {
    const refuse = (run: () => unknown, message: RegExp) => {
      let error: unknown;
      try {
        run();
      } catch (caught) {
        error = caught;
      }
      expect(error).toMatchObject({ code: "ALLREDUCE_FAILED" });
      expect(String(error)).toMatch(message);
    };
    refuse(() => planRound(group(members), [4, 1, 4, 1], 10, "a"), /client-mode member 1/);
    refuse(() => planRound(group(members), [4, 0, 4, 2], 10, "zz"), /zz is not a member/);
    refuse(() => planRound(group(members), [4, 0, 6], 10, "a"), /part counts/);
    refuse(
      () =>
        planRound(group([...members, { peerId: "a", mode: "node", weight: 1 }]), [4, 0, 4, 2, 0], 10, "a"),
      /twice/,
    );
    refuse(() => planRound(group([{ peerId: "a", mode: "aux", weight: 1 }]), [1], 1, "a"), /aux member 0/);
    refuse(
      () => planRound(group([{ peerId: "a", mode: "node", weight: 0 }]), [1], 1, "a"),
      /no member contributes/,
    );
    refuse(
      () => planRound(group([{ peerId: "a", mode: "node", weight: Number.NaN }]), [1], 1, "a"),
      /weight NaN/,
    );
    expect(() => planRound(group(members), [4, 0, 4, 1], 10, "a")).toThrow(
      expect.objectContaining({ code: "LENGTH_MISMATCH" }),
    );
  });
});
