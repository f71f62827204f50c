/**
 * The peer's one seeded generator, for parameter initialization, dropout seeds, shard order, the
 * shuffle buffer and masking. Every peer must start from the same initial bits on any JavaScript
 * engine, so it uses only integer ops and exactly rounded float arithmetic (+, −, ×, ÷):
 * mulberry32 for uniforms, and for normals the Irwin–Hall sum of 12 uniforms minus 6 (mean 0,
 * variance exactly 1, tails cut at ±6). Box–Muller would need Math.log and Math.cos, which
 * ECMAScript does not require to be correctly rounded. Not for cryptography.
 */
export class SeededRandom {
  #state: number;

  /**
   * `seed` is any safe integer (both 32-bit halves feed the state); `stream` picks one of many
   * independent streams for the same seed, e.g. `hashName(tensorName)` or a pass number.
   */
  constructor(seed: number, stream = 0) {
    this.#state = mixSeed(seed, stream);
  }

  /** A uniform 32-bit unsigned integer (mulberry32). */
  nextUint32(): number {
    this.#state = (this.#state + 0x6d2b79f5) >>> 0;
    let t = this.#state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  }

  /** A uniform float in [0, 1). */
  nextFloat(): number {
    return this.nextUint32() / 4_294_967_296;
  }

  /** A uniform integer in [0, n); n must be a positive integer. */
  int(n: number): number {
    return Math.floor(this.nextFloat() * n);
  }

  /** An approximately standard normal sample (Irwin–Hall, 12 uniforms). */
  nextNormal(): number {
    let sum = 0;
    for (let i = 0; i < 12; i++) sum += this.nextFloat();
    return sum - 6;
  }

  /** A normal sample with standard deviation `std`, redrawn until it lies within ±`bound`·std. */
  nextTruncatedNormal(std: number, bound = 2): number {
    for (;;) {
      const z = this.nextNormal();
      if (z >= -bound && z <= bound) return z * std;
    }
  }

  /** Shuffles `items` in place (Fisher–Yates) and returns it. */
  shuffle<T>(items: T[]): T[] {
    for (let i = items.length - 1; i > 0; i--) {
      const j = this.int(i + 1);
      const a = items[i] as T;
      items[i] = items[j] as T;
      items[j] = a;
    }
    return items;
  }
}

/**
 * Hashes a safe-integer seed and a 32-bit salt into a 32-bit state, so nearby seeds (0, 1, 2…) and
 * seeds that differ only above bit 32 give unrelated streams. Throws RangeError on other seeds.
 */
export function mixSeed(seed: number, salt: number): number {
  if (!Number.isSafeInteger(seed)) throw new RangeError(`seed must be a safe integer, got ${seed}`);
  const low = seed >>> 0;
  const high = Math.floor(seed / 4_294_967_296) >>> 0;
  let h = Math.imul(low ^ 0x85ebca6b, 0xcc9e2d51) ^ salt;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h ^= Math.imul(high ^ 0xc2b2ae35, 0x1b873593);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/** A seed for the independent stream `stream` of `seed`, e.g. one per pass or per purpose. */
export function deriveSeed(seed: number, stream: number): number {
  return mixSeed(seed, stream >>> 0);
}

/** FNV-1a hash of a string: a tensor's own init stream, or a peer's own seed from its PeerId. */
export function hashName(name: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < name.length; i++) {
    h ^= name.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}
