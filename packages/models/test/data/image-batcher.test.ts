import { describe, expect, it } from "vitest";
import { toImageBatch } from "../../src/data/image-batcher.ts";

describe("toImageBatch", () => {
  it("scales pixels to [0, 1] row by row and keeps the labels", () => {
    const a = new Uint8Array(784).fill(255);
    a[0] = 0;
    const b = new Uint8Array(784).fill(51);
    const batch = toImageBatch([
      { pixels: a, label: 7 },
      { pixels: b, label: 2 },
    ]);
    expect(batch.kind).toBe("image");
    expect(batch.size).toBe(2);
    expect(batch.pixels).toHaveLength(2 * 784);
    expect(batch.pixels[0]).toBe(0);
    expect(batch.pixels[1]).toBe(1);
    expect(batch.pixels[784]).toBeCloseTo(0.2, 6);
    expect(batch.pixels[2 * 784 - 1]).toBeCloseTo(0.2, 6);
    expect([...batch.labels]).toEqual([7, 2]);
  });
});
