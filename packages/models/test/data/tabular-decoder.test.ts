import { describe, expect, it } from "vitest";
import { DatasetErrorCode, isDatasetError } from "../../src/data/dataset-error.ts";
import { toTabularBatch } from "../../src/data/tabular-batcher.ts";
import { decodeTabularShard } from "../../src/data/tabular-decoder.ts";
import { tabularRecord } from "./dataset-fixture.ts";

function shard(rows: { features: number[]; label: number }[]): Uint8Array {
  return new Uint8Array(Buffer.concat(rows.map((row) => tabularRecord(row))));
}

function refusal(run: () => unknown): Error {
  try {
    run();
  } catch (error) {
    expect(isDatasetError(error, DatasetErrorCode.SHARD_MALFORMED)).toBe(true);
    return error as Error;
  }
  throw new Error("expected a refusal");
}

describe("decodeTabularShard", () => {
  const rows = [
    { features: [0.5, -1.25, 3], label: 2 },
    { features: [1e-3, 0, -7.5], label: 0 },
  ];

  it("splits float32 little-endian records into features and labels, each row its own copy", () => {
    const bytes = shard(rows);
    const records = decodeTabularShard(bytes, "train-00000.bin", {
      features: 3,
      classes: 3,
      expectedRecords: 2,
    });
    expect(records.map((r) => [...r.features])).toEqual(rows.map((r) => r.features.map(Math.fround)));
    expect(records.map((r) => r.label)).toEqual([2, 0]);
    expect(records[0]?.features.buffer).not.toBe(bytes.buffer);
    const batch = toTabularBatch(records, 3);
    expect(batch).toMatchObject({ kind: "tabular", size: 2 });
    expect([...batch.features]).toEqual(rows.flatMap((r) => r.features.map(Math.fround)));
    expect([...batch.labels]).toEqual([2, 0]);
  });

  it("reads a shard that starts at an odd offset of its buffer", () => {
    const bytes = shard(rows);
    const padded = new Uint8Array(bytes.byteLength + 1);
    padded.set(bytes, 1);
    const records = decodeTabularShard(padded.subarray(1), "train-00000.bin", { features: 3, classes: 3 });
    expect(records.map((r) => r.label)).toEqual([2, 0]);
  });

  it("takes any finite value as a regression label", () => {
    const records = decodeTabularShard(shard([{ features: [1], label: -12.5 }]), "f", {
      features: 1,
      classes: undefined,
    });
    expect(records[0]?.label).toBe(-12.5);
  });

  it("refuses a shard whose length is not a whole number of records", () => {
    const bytes = shard(rows).subarray(0, 30);
    expect(
      refusal(() => decodeTabularShard(bytes, "train-00001.bin", { features: 3, classes: 3 })).message,
    ).toMatch(
      /train-00001\.bin is malformed: 30 bytes is not a whole number of 16-byte records \(3 features and a label/,
    );
  });

  it("refuses a record count other than the manifest's", () => {
    expect(
      refusal(() => decodeTabularShard(shard(rows), "f", { features: 3, classes: 3, expectedRecords: 3 }))
        .message,
    ).toMatch(/holds 2 records, the manifest says 3/);
  });

  it.each([
    { label: 3, message: /record 0 has label 3; class labels must be whole numbers 0…2/ },
    { label: 1.5, message: /record 0 has label 1.5/ },
    { label: -1, message: /record 0 has label -1/ },
  ])("refuses class label $label", ({ label, message }) => {
    const bytes = shard([{ features: [0, 0, 0], label }]);
    expect(refusal(() => decodeTabularShard(bytes, "f", { features: 3, classes: 3 })).message).toMatch(
      message,
    );
  });

  it("refuses values that are not finite", () => {
    const nanFeature = shard([{ features: [0, Number.NaN, 0], label: 0 }]);
    expect(refusal(() => decodeTabularShard(nanFeature, "f", { features: 3, classes: 3 })).message).toMatch(
      /record 0 has feature 1 = NaN/,
    );
    const infiniteLabel = shard([{ features: [0], label: Number.POSITIVE_INFINITY }]);
    expect(
      refusal(() => decodeTabularShard(infiniteLabel, "f", { features: 1, classes: undefined })).message,
    ).toMatch(/a value label must be finite/);
  });
});
