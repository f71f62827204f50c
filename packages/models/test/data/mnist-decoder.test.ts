import { describe, expect, it } from "vitest";
import { DatasetErrorCode, isDatasetError } from "../../src/data/dataset-error.ts";
import { decodeMnistShard } from "../../src/data/mnist-decoder.ts";
import { mnistDataset, mnistId } from "./dataset-fixture.ts";

function malformed(run: () => unknown): string {
  try {
    run();
  } catch (error) {
    expect(isDatasetError(error, DatasetErrorCode.SHARD_MALFORMED)).toBe(true);
    return String(error);
  }
  throw new Error("expected SHARD_MALFORMED, but the shard was accepted");
}

describe("decodeMnistShard", () => {
  const { files } = mnistDataset(12, 0, 12);
  const bytes = files.get("train-00000.bin") ?? new Uint8Array();

  it("splits a shard into 784-pixel views and labels", () => {
    const records = decodeMnistShard(bytes, "train-00000.bin", 12);
    expect(records.map((r) => mnistId(r.pixels))).toEqual(Array.from({ length: 12 }, (_, i) => i));
    expect(records.map((r) => r.label)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]);
    expect(records[3]?.pixels).toHaveLength(784);
    expect(records[3]?.pixels.buffer).not.toBe(bytes.buffer); // a copy: the shard can be freed
  });

  it("refuses partial records, a wrong count and labels ≥ 10", () => {
    expect(malformed(() => decodeMnistShard(bytes.subarray(0, 785 * 2 + 1), "f"))).toMatch(/whole number/);
    expect(malformed(() => decodeMnistShard(bytes, "f", 11))).toMatch(
      /holds 12 records, the manifest says 11/,
    );
    const bad = bytes.slice();
    bad[785 * 5 + 784] = 10;
    expect(malformed(() => decodeMnistShard(bad, "f"))).toMatch(/record 5 has label 10/);
  });
});
