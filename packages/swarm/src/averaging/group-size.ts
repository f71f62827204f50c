/**
 * Moshpit group size (DeDLOC Appendix C). Averaging in groups of m instead of one all-reduce over
 * all n peers needs ⌈log_m n⌉ rounds to reach the global average, but a group only fails when one
 * of its own m members does, so small groups win when failures are frequent and one big group
 * (m = n, plain all-reduce) wins when they are rare.
 */

function checkWhole(name: string, value: number, min: number): void {
  if (!Number.isSafeInteger(value) || value < min) {
    throw new RangeError(`${name} must be a whole number ≥ ${min}, got ${value}`);
  }
}

function checkFailureRate(failureRate: number): void {
  if (!(failureRate >= 0 && failureRate < 1)) {
    throw new RangeError(`failure rate must be in [0, 1), got ${failureRate}`);
  }
}

/**
 * Rounds of group averaging over a grid of side `m` that hold `n` peers: ⌈log_m n⌉, the number of
 * grid dimensions (1 when n ≤ m, one group holds everyone). Computed with integers, so exact
 * powers (n = m^d) are never off by one.
 */
export function moshpitDimensions(n: number, m: number): number {
  checkWhole("peer count", n, 0);
  checkWhole("group size", m, 1);
  if (n <= m) return 1;
  if (m === 1) throw new RangeError(`groups of 1 never average ${n} peers`);
  let dimensions = 1;
  for (let capacity = m; capacity < n; capacity *= m) dimensions++;
  return dimensions;
}

/**
 * Expected number of all-reduce iterations to reach the global average with groups of `m`:
 * ⌈log_m n⌉ rounds, and a round is repeated until its group succeeds, which happens with
 * probability (1 − p)^m when each peer fails a round with probability p.
 */
export function expectedIterations(n: number, failureRate: number, m: number): number {
  checkFailureRate(failureRate);
  return moshpitDimensions(n, m) / (1 - failureRate) ** m;
}

/**
 * The group size in [2, min(n, maxGroupSize)] with the fewest expected iterations; ties go to the
 * larger group (fewer, bigger all-reduces). Returns 1 for n ≤ 1 (nothing to average).
 * With no failures this is n whenever n ≤ maxGroupSize, as DeDLOC observed in all its runs.
 */
export function optimalGroupSize(n: number, failureRate: number, maxGroupSize: number): number {
  checkWhole("peer count", n, 0);
  checkWhole("maximum group size", maxGroupSize, 2);
  checkFailureRate(failureRate);
  if (n <= 1) return 1;
  let best = 2;
  let bestIterations = Infinity;
  for (let m = 2; m <= Math.min(n, maxGroupSize); m++) {
    const iterations = expectedIterations(n, failureRate, m);
    if (iterations <= bestIterations) {
      best = m;
      bestIterations = iterations;
    }
  }
  return best;
}
