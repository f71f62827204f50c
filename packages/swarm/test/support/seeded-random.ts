/**
 * A seeded pseudo-random generator (mulberry32): numbers in [0, 1), the same sequence on every run
 * and every machine, so tests and benchmarks see the same vectors each time.
 */
export function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** `length` floats in [-1, 1) from `seed`. */
export function seededFloats(seed: number, length: number): Float32Array {
  const random = seededRandom(seed);
  const out = new Float32Array(length);
  for (let i = 0; i < length; i += 1) out[i] = random() * 2 - 1;
  return out;
}
