import type { DatasetManifest, DatasetShard, DatasetSplit } from "@barnraise/protocol";
import { DatasetError, DatasetErrorCode } from "./dataset-error.ts";
import type { DatasetSource } from "./dataset-source.ts";
import { deriveSeed, SeededRandom } from "../seeded-random.ts";

/** Turns one downloaded, verified shard into its records. */
export type ShardDecoder<T> = (bytes: Uint8Array, shard: DatasetShard) => readonly T[];

/** Options of `ShardStream`. */
export interface ShardStreamOptions<T> {
  readonly source: DatasetSource;
  readonly manifest: DatasetManifest;
  readonly split: DatasetSplit;
  /** This peer's seed: it fixes the shard order of every pass. */
  readonly seed: number;
  /** Shards downloaded ahead of the one being consumed (≥ 0); at most `prefetch + 1` are held. */
  readonly prefetch: number;
  readonly decode: ShardDecoder<T>;
  /** Stops the stream and cancels its downloads. */
  readonly signal?: AbortSignal;
}

/** A downloaded shard's records, with where they came from. */
export interface LoadedShard<T> {
  readonly shard: DatasetShard;
  /** 0 for the first pass over the split, 1 for the second, … */
  readonly pass: number;
  readonly records: readonly T[];
}

/**
 * The records of one split, shard by shard (DeDLOC §3.3). For "train" it is endless: each pass
 * visits every shard once, in an order drawn from this peer's seed and the pass number, so peers
 * read the dataset in different orders and a peer's next pass differs from its last. For "test" it
 * is one pass in manifest order. The next `prefetch` shards download in the background while the
 * current one is consumed; leaving the loop (or aborting `signal`) cancels them.
 */
export class ShardStream<T> implements AsyncIterable<T> {
  readonly #options: ShardStreamOptions<T>;
  readonly #shards: readonly DatasetShard[];

  constructor(options: ShardStreamOptions<T>) {
    if (!Number.isInteger(options.prefetch) || options.prefetch < 0) {
      throw new RangeError(`prefetch must be a non-negative integer, got ${options.prefetch}`);
    }
    this.#options = options;
    this.#shards = options.manifest.shards.filter((shard) => shard.split === options.split);
    if (options.split === "train" && !this.#shards.some((shard) => shard.records > 0)) {
      throw new DatasetError(
        DatasetErrorCode.INCOMPATIBLE,
        `dataset ${options.manifest.name} has no train records to stream; prepare it again without a tiny --limit`,
      );
    }
  }

  /** The shard order of pass `pass`: manifest order for "test", a seeded permutation for "train". */
  passOrder(pass: number): DatasetShard[] {
    const shards = [...this.#shards];
    if (this.#options.split === "test") return shards;
    return new SeededRandom(deriveSeed(this.#options.seed, pass)).shuffle(shards);
  }

  /** Every record, in shard order (each shard's records in file order). */
  async *records(): AsyncGenerator<T> {
    for await (const loaded of this.shards()) yield* loaded.records;
  }

  [Symbol.asyncIterator](): AsyncGenerator<T> {
    return this.records();
  }

  /** Downloaded, decoded shards, with up to `prefetch` more downloading behind the current one. */
  async *shards(): AsyncGenerator<LoadedShard<T>> {
    const { source, decode, prefetch, signal } = this.#options;
    const controller = new AbortController();
    const onAbort = (): void => {
      controller.abort(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    if (signal?.aborted === true) onAbort();
    const order = this.#order();
    const pending: Promise<LoadedShard<T>>[] = [];
    const startNext = (): boolean => {
      const next = order.next();
      if (next.done === true) return false;
      const { shard, pass } = next.value;
      const loading = source
        .shard(shard, controller.signal)
        .then((bytes): LoadedShard<T> => ({ shard, pass, records: decode(bytes, shard) }));
      // Awaited later; until then a failure must not count as unhandled.
      loading.catch(() => undefined);
      pending.push(loading);
      return true;
    };
    try {
      for (;;) {
        controller.signal.throwIfAborted();
        if (pending.length === 0 && !startNext()) return;
        const current = pending.shift();
        if (current === undefined) return;
        while (pending.length < prefetch && startNext());
        yield await current;
      }
    } finally {
      controller.abort(new DOMException("the shard stream was closed", "AbortError"));
      signal?.removeEventListener("abort", onAbort);
    }
  }

  *#order(): Generator<{ shard: DatasetShard; pass: number }> {
    for (let pass = 0; ; pass++) {
      for (const shard of this.passOrder(pass)) yield { shard, pass };
      if (this.#options.split === "test") return;
    }
  }
}
