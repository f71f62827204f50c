/** L2 norm summed in float64 in index order, the same bits on every peer. */
export function l2Norm(vector: Float32Array): number {
  let sum = 0;
  // An index loop: iterating a typed array with for…of is several times slower here.
  for (let i = 0; i < vector.length; i++) {
    const value = vector[i] ?? 0;
    sum += value * value;
  }
  return Math.sqrt(sum);
}

/** Multiplies every element of `vector` by `factor`, in place. */
export function scale(vector: Float32Array, factor: number): void {
  for (let i = 0; i < vector.length; i++) vector[i] = (vector[i] ?? 0) * factor;
}
