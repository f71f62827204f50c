/**
 * Group keys for Moshpit All-Reduce (Ryabinin et al., Algorithm 1). Peers sit in a virtual grid
 * of d dimensions with m positions each. A peer tracks d − 1 coordinates, its grid index C; the
 * peers that share C in a round form one group, and a peer's position in that group is its d-th
 * coordinate. After each round C drops its first coordinate and appends the position, so the
 * members of one group all land in different groups next round, and on a full grid (m^d peers)
 * d rounds yield the exact global average (Theorem 1).
 */

function checkWhole(name: string, value: number, min: number): void {
  if (!Number.isSafeInteger(value) || value < min) {
    throw new RangeError(`${name} must be a whole number ≥ ${min}, got ${value}`);
  }
}

/**
 * A uniformly random grid index: d − 1 coordinates in [0, m). `random` returns numbers in [0, 1)
 * like `Math.random`; inject a seeded one for reproducible tests.
 */
export function initialGridIndex(dimensions: number, groupSize: number, random: () => number): number[] {
  checkWhole("grid dimensions", dimensions, 1);
  checkWhole("group size", groupSize, 1);
  return Array.from({ length: dimensions - 1 }, () => {
    const r = random();
    if (!(r >= 0 && r < 1)) throw new RangeError(`random() must return a number in [0, 1), got ${r}`);
    return Math.min(groupSize - 1, Math.floor(r * groupSize));
  });
}

/**
 * The matchmaking key of the group for this epoch (training step) and round, e.g. "e12/r0/3.1".
 * With d = 1 the index is empty and every peer gets the same key: one group, plain all-reduce.
 * After a rollback (run `generation` > 0) the key starts with it, "g1/e12/r0/", so that the rounds
 * of the rolled-back timeline never meet the groups its epochs had before.
 */
export function groupKey(
  epoch: number,
  round: number,
  index: readonly number[],
  generation: number = 0,
): string {
  checkWhole("epoch", epoch, 0);
  checkWhole("round", round, 0);
  checkWhole("generation", generation, 0);
  for (const coordinate of index) checkWhole("grid coordinate", coordinate, 0);
  const key = `e${epoch}/r${round}/${index.join(".")}`;
  return generation === 0 ? key : `g${generation}/${key}`;
}

/** The parts of a group key; undefined for a key of another shape. */
export function parseGroupKey(
  key: string,
): { generation: number; epoch: number; round: number; wholeSwarm: boolean } | undefined {
  const match = /^(?:g(\d+)\/)?e(\d+)\/r(\d+)\/([\d.]*)$/.exec(key);
  if (match === null) return undefined;
  return {
    generation: Number(match[1] ?? 0),
    epoch: Number(match[2]),
    round: Number(match[3]),
    wholeSwarm: match[3] === "0" && match[4] === "",
  };
}

/**
 * The grid index for the next round: C[1:] followed by `partIndex`, this peer's position in the
 * group that just averaged (0 … group size − 1, distinct within the group, e.g. the index of the
 * part it reduced). Keeps the number of coordinates; with d = 1 the index stays empty.
 */
export function nextGridIndex(index: readonly number[], partIndex: number): number[] {
  checkWhole("part index", partIndex, 0);
  if (index.length === 0) return [];
  return [...index.slice(1), partIndex];
}
