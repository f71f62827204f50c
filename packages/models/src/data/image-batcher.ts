import type { ImageBatch } from "../models/batch.ts";
import { MNIST_PIXELS, type MnistRecord } from "./mnist-decoder.ts";

/** Packs digits into an `ImageBatch`: pixels scaled to [0, 1] (byte / 255), labels as int32. */
export function toImageBatch(records: readonly MnistRecord[]): ImageBatch {
  const size = records.length;
  const pixels = new Float32Array(size * MNIST_PIXELS);
  const labels = new Int32Array(size);
  records.forEach((record, row) => {
    const offset = row * MNIST_PIXELS;
    for (let i = 0; i < MNIST_PIXELS; i++) pixels[offset + i] = (record.pixels[i] ?? 0) / 255;
    labels[row] = record.label;
  });
  return { kind: "image", size, pixels, labels };
}
