import type { TabularBatch } from "../models/batch.ts";
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
