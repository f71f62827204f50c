import { describe, expect, it } from "vitest";
import {
  centeredClip,
  distance,
  medianDistance,
  weightedMedian,
} from "../../../src/averaging/aggregation/centered-clip.ts";
import { at } from "../../support/at.ts";
import { seededRandom } from "../../support/seeded-random.ts";

/** `count` points of `length` elements around `centre`, each coordinate within ±spread. */
function cloud(count: number, length: number, centre: number, spread: number, seed: number): Float64Array[] {
  const random = seededRandom(seed);
  return Array.from({ length: count }, () =>
    Float64Array.from({ length }, () => centre + (random() * 2 - 1) * spread),
  );
}

function weightedMean(points: readonly Float64Array[], weights: readonly number[]): Float64Array {
  const total = weights.reduce((sum, weight) => sum + weight, 0);
  const mean = new Float64Array(at(points, 0).length);
  points.forEach((point, k) => {
    for (let i = 0; i < mean.length; i++) mean[i] = at(mean, i) + (at(weights, k) * at(point, i)) / total;
  });
  return mean;
}

describe("weightedMedian", () => {
  it("takes per element the value where half the weight is reached", () => {
    const points = [
      [1, 10],
      [2, -5],
      [100, 0],
    ];
    expect([...weightedMedian(points, [1, 1, 1])]).toEqual([2, 0]);
    // A heavy point carries the median.
    expect([...weightedMedian(points, [1, 1, 5])]).toEqual([100, 0]);
  });
});

describe("centeredClip", () => {
  it("is the weighted mean when every point lies within the radius", () => {
    const points = cloud(6, 20, 0.3, 0.1, 1);
    const weights = [1, 2, 3, 4, 5, 6];
    const mean = weightedMean(points, weights);
    const clipped = centeredClip(points, weights, { radius: 10, iterations: 5 });
    for (let i = 0; i < mean.length; i++) expect(at(clipped, i)).toBeCloseTo(at(mean, i), 12);
  });

  it("bounds one outlier's influence by its weight times the radius, however far it is", () => {
    const honest = cloud(7, 32, 0.5, 0.2, 2);
    const weights = Array.from({ length: 8 }, () => 1);
    const clean = weightedMean(honest, weights.slice(1));
    const radius = 2 * medianDistance(honest, weights.slice(1), weightedMedian(honest, weights.slice(1)));
    for (const scale of [10, 1000, 1e6]) {
      const outlier = honest[0]?.map((value) => value * scale) ?? new Float64Array();
      const points = [outlier, ...honest];
      const clipped = centeredClip(points, weights, { radius, iterations: 20 });
      const mean = weightedMean(points, weights);
      // The mean follows the outlier; CenteredClip stays within one clipped step of the honest mean.
      expect(distance(mean, clean)).toBeGreaterThan(scale / 20);
      expect(distance(clipped, clean)).toBeLessThan((2 * radius) / 8);
    }
  });

  it("converges towards the honest points when one sends its vector sign-flipped and scaled", () => {
    const honest = cloud(7, 16, 1, 0.05, 3);
    const weights = Array.from({ length: 8 }, () => 1);
    const flipped = honest[0]?.map((value) => -100 * value) ?? new Float64Array();
    const points = [...honest, flipped];
    const clean = weightedMean(honest, weights.slice(1));
    const radius = 2 * medianDistance(points, weights, weightedMedian(points, weights));
    const errors = [1, 3, 10].map((iterations) =>
      distance(centeredClip(points, weights, { radius, iterations }), clean),
    );
    // Every coordinate stays positive (the honest sign) and more iterations do not drift away.
    const result = centeredClip(points, weights, { radius, iterations: 10 });
    for (const value of result) expect(value).toBeGreaterThan(0.5);
    expect(at(errors, 2)).toBeLessThanOrEqual(at(errors, 0) + 1e-12);
    expect(at(errors, 2)).toBeLessThan(radius / 4);
    expect(distance(weightedMean(points, weights), clean)).toBeGreaterThan(10);
  });

  it("respects the weights", () => {
    const points = [[0], [1]];
    // Within the radius: the weighted mean, 3/4 of the way to the heavier point.
    expect(at(centeredClip(points, [1, 3], { radius: 5, iterations: 3 }), 0)).toBeCloseTo(0.75, 12);
    // Doubling every weight changes nothing.
    expect(at(centeredClip(points, [2, 6], { radius: 5, iterations: 3 }), 0)).toBeCloseTo(0.75, 12);
    // A far point of small weight moves the result less than one of large weight.
    const far = [[0], [0], [100]];
    const light = at(centeredClip(far, [1, 1, 0.1], { radius: 1, iterations: 10 }), 0);
    const heavy = at(centeredClip(far, [1, 1, 1], { radius: 1, iterations: 10 }), 0);
    expect(light).toBeGreaterThan(0);
    expect(light).toBeLessThan(heavy);
  });

  it("stays at the start with a zero radius and rejects bad input", () => {
    const points = [[0], [1], [5]];
    expect(at(centeredClip(points, [1, 1, 1], { radius: 0, iterations: 4 }), 0)).toBe(1);
    expect(() => centeredClip([], [], { radius: 1, iterations: 1 })).toThrow(RangeError);
    expect(() => centeredClip(points, [1, 1, 1], { radius: 1, iterations: 0 })).toThrow(RangeError);
  });
});
