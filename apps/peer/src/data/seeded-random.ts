/**
 * A small seeded pseudo-random generator (xoshiro128**, seeded through splitmix32) for everything
 * the data pipeline randomises: shard order, the shuffle buffer and masking. Seeded so that a test,
 * or a peer restarted with the same seed, sees the same sequence; not for cryptography.
 */
export class SeededRandom {
  readonly #state: Uint32Array;

  constructor(seed: number) {
    this.#state = new Uint32Array(4);
    let x = seed >>> 0;
    for (let i = 0; i < 4; i++) {
      x = (x + 0x9e3779b9) >>> 0;
      this.#state[i] = splitmix32(x);
    }
    if (this.#state.every((word) => word === 0)) this.#state[0] = 1;
  }

  /** A uniform 32-bit unsigned integer. */
  nextUint32(): number {
    const s = this.#state;
    const s0 = s[0] ?? 0;
    const s1 = s[1] ?? 0;
    const s2 = s[2] ?? 0;
    const s3 = s[3] ?? 0;
    const result = Math.imul(rotl(Math.imul(s1, 5), 7), 9) >>> 0;
    const t = (s1 << 9) >>> 0;
    const n2 = (s2 ^ s0) >>> 0;
    const n3 = (s3 ^ s1) >>> 0;
    s[1] = s1 ^ n2;
    s[0] = s0 ^ n3;
    s[2] = n2 ^ t;
    s[3] = rotl(n3, 11);
    return result;
  }

  /** A uniform float in [0, 1). */
  next(): number {
    return this.nextUint32() / 4294967296;
  }

  /** A uniform integer in [0, n); n must be a positive integer. */
  int(n: number): number {
    return Math.floor(this.next() * n);
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

/** A seed for an independent stream `stream` of `seed`, e.g. one per pass or per purpose. */
export function deriveSeed(seed: number, stream: number): number {
  return splitmix32((Math.imul(seed >>> 0, 0x85ebca6b) ^ splitmix32(stream >>> 0)) >>> 0);
}

/** A 32-bit seed from a string such as a PeerId (FNV-1a), so each peer gets its own order. */
export function seedFromString(text: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  return hash >>> 0;
}

function rotl(x: number, k: number): number {
  return ((x << k) | (x >>> (32 - k))) >>> 0;
}

function splitmix32(input: number): number {
  let z = (input + 0x9e3779b9) >>> 0;
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
  return (z ^ (z >>> 16)) >>> 0;
}
