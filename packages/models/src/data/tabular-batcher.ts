import type { TabularBatch } from "../models/batch.ts";
import type { ImageRecord } from "./image-decoder.ts";
import type { TabularRecord } from "./tabular-decoder.ts";

/** Packs rows of `features` values each into a `TabularBatch`, in order. */
export function toTabularBatch(records: readonly TabularRecord[], features: number): TabularBatch {
  const size = records.length;
  const values = new Float32Array(size * features);
  const labels = new Float32Array(size);
  records.forEach((record, row) => {
    values.set(record.features, row * features);
    labels[row] = record.label;
  });
  return { kind: "tabular", size, features: values, labels };
}

/** Packs images into a `TabularBatch` for an uploaded model: pixels scaled to [0, 1], in order. */
export function imagesToTabularBatch(records: readonly ImageRecord[], features: number): TabularBatch {
  const size = records.length;
  const values = new Float32Array(size * features);
  const labels = new Float32Array(size);
  records.forEach((record, row) => {
    const offset = row * features;
    for (let i = 0; i < features; i++) values[offset + i] = (record.pixels[i] ?? 0) / 255;
    labels[row] = record.label;
  });
  return { kind: "tabular", size, features: values, labels };
}
