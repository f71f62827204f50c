import type { SeededRandom } from "../seeded-random.ts";

/**
 * A fixed-size shuffle buffer (DeDLOC §3.3): records stream in shard by shard, so shuffling the
 * shard order alone would keep each shard's records together; the buffer mixes records across
 * neighbouring shards. It fills up first, then each new record replaces a randomly chosen one,
 * which is emitted.
 */
export class ShuffleBuffer<T> {
  readonly capacity: number;
  readonly #items: T[] = [];
  readonly #random: SeededRandom;

  constructor(capacity: number, random: SeededRandom) {
    if (!Number.isInteger(capacity) || capacity < 1) {
      throw new RangeError(`shuffle buffer capacity must be a positive integer, got ${capacity}`);
    }
    this.capacity = capacity;
    this.#random = random;
  }

  /** Records held now. */
  get size(): number {
    return this.#items.length;
  }

  /** Adds `item`; once the buffer is full, returns a random held record that `item` replaced. */
  add(item: T): T | undefined {
    if (this.#items.length < this.capacity) {
      this.#items.push(item);
      return undefined;
    }
    const j = this.#random.int(this.capacity);
    const out = this.#items[j];
    this.#items[j] = item;
    return out;
  }

  /** Empties the buffer in random order (at the end of a finite stream). */
  *drain(): Generator<T> {
    while (this.#items.length > 0) {
      const j = this.#random.int(this.#items.length);
      const last = this.#items.pop() as T;
      if (j === this.#items.length) {
        yield last;
      } else {
        const out = this.#items[j] as T;
        this.#items[j] = last;
        yield out;
      }
    }
  }
}

/** Passes `source` through `buffer`: a locally shuffled stream of the same records. */
export async function* shuffled<T>(source: AsyncIterable<T>, buffer: ShuffleBuffer<T>): AsyncGenerator<T> {
  for await (const item of source) {
    const out = buffer.add(item);
    if (out !== undefined) yield out;
  }
  yield* buffer.drain();
}
