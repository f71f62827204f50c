import type { Aggregator } from "./aggregator.ts";

/**
 * CenteredClip (Karimireddy, He and Jaggi 2021), the robust aggregation BTARD (Gorbunov et al.
 * 2021) applies to each part of its all-reduce: starting from a robust centre v, repeat
 *
 *   v ← v + Σ w_i (x_i − v) min(1, r / ‖x_i − v‖) / Σ w_i
 *
 * Points within the radius r of v count as in the weighted mean; a point farther away is pulled
 * back onto the sphere of radius r around v, so it moves the result by at most w_i r / Σ w_i
 * however far it is. When every point stays within r of the iterates the result is the weighted
 * mean. Everything here is pure and computed in float64, in input order, so every run on the same
 * input gives the same bits.
 */

export interface CenteredClipOptions {
  /** The clipping radius r (ℓ2), absolute; 0 keeps v at the start. */
  radius: number;
  /** Updates of v, at least one. */
  iterations: number;
  /** Where the iterations start; default the coordinate-wise weighted median. */
  start?: Float64Array;
}

/** Up to this many points, each coordinate's values are ordered by insertion (fast for few). */
const INSERTION_SORT_POINTS = 32;

/**
 * The coordinate-wise weighted median: per element, the smallest value at which the weights of
 * the values not above it reach half the total weight. Robust to any minority of the weight.
 * It is the start of every CenteredClip and its most expensive part, so each coordinate's few values
 * are ordered in place (insertion sort into a reused buffer) rather than by a comparator per call.
 */
export function weightedMedian(
  points: readonly ArrayLike<number>[],
  weights: readonly number[],
): Float64Array {
  const length = points[0]?.length ?? 0;
  const median = new Float64Array(length);
  const count = points.length;
  if (count === 0) return median;
  const total = weights.reduce((sum, weight) => sum + weight, 0);
  const values = new Float64Array(count);
  const sorted = new Float64Array(count);
  const sortedWeights = new Float64Array(count);
  const order = points.map((_, index) => index);
  for (let i = 0; i < length; i++) {
    for (let k = 0; k < count; k++) values[k] = points[k]?.[i] ?? 0;
    if (count <= INSERTION_SORT_POINTS) {
      for (let k = 0; k < count; k++) {
        const value = values[k] ?? 0;
        const weight = weights[k] ?? 0;
        let j = k;
        // Strictly greater: equal values keep their input order, as a stable sort would.
        while (j > 0 && (sorted[j - 1] ?? 0) > value) {
          sorted[j] = sorted[j - 1] ?? 0;
          sortedWeights[j] = sortedWeights[j - 1] ?? 0;
          j -= 1;
        }
        sorted[j] = value;
        sortedWeights[j] = weight;
      }
    } else {
      order.sort((a, b) => (values[a] ?? 0) - (values[b] ?? 0) || a - b);
      order.forEach((index, k) => {
        sorted[k] = values[index] ?? 0;
        sortedWeights[k] = weights[index] ?? 0;
      });
    }
    let below = 0;
    for (let k = 0; k < count; k++) {
      below += sortedWeights[k] ?? 0;
      if (2 * below >= total) {
        median[i] = sorted[k] ?? 0;
        break;
      }
    }
  }
  return median;
}

/** The ℓ2 distance from `point` to `centre`. */
export function distance(point: ArrayLike<number>, centre: ArrayLike<number>): number {
  let squares = 0;
  for (let i = 0; i < centre.length; i++) {
    const difference = (point[i] ?? 0) - (centre[i] ?? 0);
    squares += difference * difference;
  }
  return Math.sqrt(squares);
}

/**
 * The weighted median of the points' distances to `centre`: a typical point's distance, which
 * a minority of far points cannot inflate. The reducer scales the clipping radius by it.
 */
export function medianDistance(
  points: readonly ArrayLike<number>[],
  weights: readonly number[],
  centre: ArrayLike<number>,
): number {
  const distances = points.map((point) => [distance(point, centre)]);
  return weightedMedian(distances, weights)[0] ?? 0;
}

/** CenteredClip of `points` (all of one length) with positive `weights`; see the module comment. */
export function centeredClip(
  points: readonly ArrayLike<number>[],
  weights: readonly number[],
  options: CenteredClipOptions,
): Float64Array {
  if (points.length !== weights.length || points.length === 0) {
    throw new RangeError(`centered clip of ${points.length} points with ${weights.length} weights`);
  }
  if (!(options.radius >= 0) || !(Number.isInteger(options.iterations) && options.iterations >= 1)) {
    throw new RangeError(`centered clip with radius ${options.radius}, ${options.iterations} iterations`);
  }
  const length = points[0]?.length ?? 0;
  const total = weights.reduce((sum, weight) => sum + weight, 0);
  const centre = options.start === undefined ? weightedMedian(points, weights) : options.start.slice();
  const step = new Float64Array(length);
  for (let iteration = 0; iteration < options.iterations; iteration++) {
    step.fill(0);
    points.forEach((point, index) => {
      const away = distance(point, centre);
      const scale = ((weights[index] ?? 0) * (away > options.radius ? options.radius / away : 1)) / total;
      if (scale === 0) return;
      for (let i = 0; i < length; i++)
        step[i] = (step[i] ?? 0) + scale * ((point[i] ?? 0) - (centre[i] ?? 0));
    });
    let moved = 0;
    for (let i = 0; i < length; i++) {
      centre[i] = (centre[i] ?? 0) + (step[i] ?? 0);
      moved += Math.abs(step[i] ?? 0);
    }
    if (moved === 0) break;
  }
  return centre;
}

/**
 * CenteredClip as a reducer's aggregation: the radius is `tau` times the weighted median of the
 * contributions' distances to their coordinate-wise weighted median, where the iterations start
 * (see the experiment config's `averaging.centeredClip`).
 */
export class CenteredClip implements Aggregator {
  readonly #tau: number;
  readonly #iterations: number;

  /** Throws a RangeError unless `tau` ≥ 0 is finite and `iterations` a positive integer. */
  constructor(tau: number, iterations: number) {
    if (!(Number.isFinite(tau) && tau >= 0 && Number.isInteger(iterations) && iterations >= 1)) {
      throw new RangeError(`centered clip with tau ${tau}, ${iterations} iterations`);
    }
    this.#tau = tau;
    this.#iterations = iterations;
  }

  aggregate(points: readonly Float32Array[], weights: readonly number[]): Float32Array {
    const start = weightedMedian(points, weights);
    const radius = this.#tau * medianDistance(points, weights, start);
    return Float32Array.from(centeredClip(points, weights, { radius, iterations: this.#iterations, start }));
  }
}
