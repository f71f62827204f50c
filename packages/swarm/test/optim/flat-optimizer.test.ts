import { describe, expect, it } from "vitest";
import { SwarmErrorCode } from "../../src/errors.ts";
import { AdamOptimizer, integerPower } from "../../src/optim/adam.ts";
import { createFlatOptimizer } from "../../src/optim/create-flat-optimizer.ts";
import type { FlatOptimizer, OptimizerState } from "../../src/optim/flat-optimizer.ts";
import { LambOptimizer } from "../../src/optim/lamb.ts";
import { ParameterLayout } from "../../src/optim/parameter-layout.ts";
import { seededRandom } from "../support/seeded-random.ts";

/** Deterministic uniform numbers in [-1, 1). */
function random(seed: number): () => number {
  const next = seededRandom(seed);
  return () => next() * 2 - 1;
}

// ---- A straightforward float64 reference, written from the papers' formulas (deliberately unoptimized).

interface ReferenceHyper {
  beta1: number;
  beta2: number;
  epsilon: number;
  weightDecay: number;
  maxTrustRatio?: number;
}

interface ReferenceState {
  step: number;
  m: number[][];
  v: number[][];
}

/** Splits `flat` into tensors of the given lengths. */
function split(flat: ArrayLike<number>, lengths: readonly number[]): number[][] {
  let offset = 0;
  return lengths.map((length) => {
    const tensor = Array.from({ length }, (_, j) => flat[offset + j] ?? Number.NaN);
    offset += length;
    return tensor;
  });
}

function newReferenceState(lengths: readonly number[]): ReferenceState {
  return {
    step: 0,
    m: lengths.map((n) => new Array<number>(n).fill(0)),
    v: lengths.map((n) => new Array<number>(n).fill(0)),
  };
}

/** One step over tensors `weights` (updated in place); `lamb` adds the per-tensor trust ratio. */
function referenceStep(
  lamb: boolean,
  hyper: ReferenceHyper,
  state: ReferenceState,
  weights: number[][],
  gradients: number[][],
  learningRate: number,
): void {
  state.step += 1;
  const t = state.step;
  weights.forEach((w, k) => {
    const g = gradients[k] ?? [];
    const m = state.m[k] ?? [];
    const v = state.v[k] ?? [];
    const update = w.map((wi, i) => {
      const gi = g[i] ?? Number.NaN;
      m[i] = hyper.beta1 * (m[i] ?? 0) + (1 - hyper.beta1) * gi;
      v[i] = hyper.beta2 * (v[i] ?? 0) + (1 - hyper.beta2) * gi * gi;
      const mHat = (m[i] ?? 0) / (1 - Math.pow(hyper.beta1, t));
      const vHat = (v[i] ?? 0) / (1 - Math.pow(hyper.beta2, t));
      return mHat / (Math.sqrt(vHat) + hyper.epsilon) + hyper.weightDecay * wi;
    });
    let ratio = 1;
    if (lamb) {
      const wNorm = Math.hypot(...w);
      const uNorm = Math.hypot(...update);
      ratio = wNorm > 0 && uNorm > 0 ? Math.min(wNorm / uNorm, hyper.maxTrustRatio ?? Infinity) : 1;
    }
    w.forEach((wi, i) => (w[i] = wi - learningRate * ratio * (update[i] ?? Number.NaN)));
  });
}

// ---- Helpers.

function randomVector(next: () => number, size: number, scale = 1): Float32Array {
  return Float32Array.from({ length: size }, () => next() * scale);
}

function bits(vector: Float32Array): Uint32Array {
  return new Uint32Array(vector.buffer.slice(vector.byteOffset, vector.byteOffset + vector.byteLength));
}

const lengths = [24, 6, 1, 9];
const layout = new ParameterLayout(
  lengths.map((length, k) => ({
    name: `t${k}`,
    offset: lengths.slice(0, k).reduce((a, b) => a + b, 0),
    length,
  })),
);

function compareWithReference(lamb: boolean, hyper: ReferenceHyper, rates: readonly number[]): void {
  const next = random(lamb ? 7 : 3);
  const parameters = randomVector(next, layout.size);
  const weights = split(parameters, lengths);
  const state = newReferenceState(lengths);
  const optimizer: FlatOptimizer = lamb
    ? new LambOptimizer({ ...hyper, maxTrustRatio: hyper.maxTrustRatio ?? 10 }, layout)
    : new AdamOptimizer(hyper, layout);
  for (const rate of rates) {
    const gradient = randomVector(next, layout.size, 0.5);
    optimizer.step(parameters, gradient, rate);
    referenceStep(lamb, hyper, state, weights, split(gradient, lengths), rate);
  }
  expect(optimizer.stepCount).toBe(rates.length);
  const expected = weights.flat();
  // Each step rounds the parameters to float32 once (relative 6e-8); a wrong formula is off by ≥ 1e-4.
  parameters.forEach((value, i) => {
    expect(Math.abs(value - (expected[i] ?? Number.NaN))).toBeLessThan(2e-6);
  });
  // And the moments match the reference.
  const exported = optimizer.exportState();
  const m = state.m.flat();
  exported.slots.m?.forEach((value, i) => {
    expect(value).toBeCloseTo(m[i] ?? Number.NaN, 6);
  });
}

const adamHyper = { beta1: 0.9, beta2: 0.999, epsilon: 1e-8, weightDecay: 0 };
const rates = [0.05, 0.02, 0.02, 0.01, 0.03];

describe("Adam", () => {
  it("matches a float64 reference", () => {
    compareWithReference(false, adamHyper, rates);
  });

  it("matches a float64 reference with decoupled weight decay", () => {
    compareWithReference(false, { ...adamHyper, beta1: 0.8, beta2: 0.95, weightDecay: 0.1 }, rates);
  });
});

describe("LAMB", () => {
  it("matches a float64 reference", () => {
    compareWithReference(true, { ...adamHyper, epsilon: 1e-6, weightDecay: 0.01, maxTrustRatio: 10 }, rates);
  });

  it("clips the trust ratio, and uses 1 when a norm is zero", () => {
    const small = new ParameterLayout([
      { name: "big", offset: 0, length: 2 },
      { name: "zero", offset: 2, length: 2 },
      { name: "still", offset: 4, length: 1 },
    ]);
    const lamb = new LambOptimizer({ ...adamHyper, weightDecay: 0, maxTrustRatio: 2 }, small);
    // After one step the Adam direction is sign(g)·(1 − tiny): ‖u‖ ≈ √2 for the first two tensors.
    const parameters = Float32Array.from([300, 400, 0, 0, 0]);
    lamb.step(parameters, Float32Array.from([1, -1, 1, 1, 0]), 0.1);
    // ‖w‖/‖u‖ = 500/√2 ≫ 2 → 2; zero weights → 1; zero weights and zero gradient → 1.
    expect(lamb.trustRatios).toEqual([2, 1, 1]);
    expect(parameters[0]).toBeCloseTo(300 - 0.1 * 2, 4);
    expect(parameters[1]).toBeCloseTo(400 + 0.1 * 2, 4);
    expect(parameters[2]).toBeCloseTo(-0.1, 6);
    expect(parameters[4]).toBe(0);
  });

  it("uses the unclipped ratio below the bound", () => {
    const one = new ParameterLayout([{ name: "w", offset: 0, length: 2 }]);
    const lamb = new LambOptimizer({ ...adamHyper, weightDecay: 0, maxTrustRatio: 10 }, one);
    lamb.step(Float32Array.from([0.3, 0.4]), Float32Array.from([1, 1]), 0.1);
    expect(lamb.trustRatios[0]).toBeCloseTo(0.5 / Math.SQRT2, 6);
  });
});

describe("FlatOptimizer state", () => {
  const configs = [
    { name: "adam", learningRate: 1e-3, ...adamHyper, weightDecay: 0.01 },
    { name: "lamb", learningRate: 1e-3, ...adamHyper, weightDecay: 0.01, maxTrustRatio: 10 },
  ] as const;

  it.each(configs)("$name: export and import resume with identical bits", (config) => {
    const next = random(11);
    const gradients = Array.from({ length: 6 }, () => randomVector(next, layout.size));
    const a = createFlatOptimizer(config, layout);
    expect(a.name).toBe(config.name);
    const pa = randomVector(next, layout.size);
    for (const g of gradients.slice(0, 3)) a.step(pa, g, 0.01);
    const saved = a.exportState();
    const pb = pa.slice();
    const b = createFlatOptimizer(config, layout);
    b.importState(saved);
    expect(b.stepCount).toBe(3);
    for (const g of gradients.slice(3)) {
      a.step(pa, g, 0.01);
      b.step(pb, g, 0.01);
    }
    expect(bits(pb)).toEqual(bits(pa));
    expect(saved.step).toBe(3); // the export is a copy: later steps do not change it
  });

  it("exports a deep copy", () => {
    const adam = createFlatOptimizer(configs[0], layout);
    const saved = adam.exportState();
    adam.step(new Float32Array(layout.size), new Float32Array(layout.size).fill(1), 0.1);
    expect(saved.slots.m?.every((x) => x === 0)).toBe(true);
  });

  const good = (): OptimizerState => ({
    name: "adam",
    step: 2,
    slots: { m: new Float32Array(layout.size), v: new Float32Array(layout.size).fill(1) },
  });
  it.each<[string, (s: OptimizerState) => OptimizerState, string, RegExp]>([
    ["another optimizer", (s) => ({ ...s, name: "lamb" }), SwarmErrorCode.MALFORMED_MESSAGE, /for "lamb"/],
    ["a negative step", (s) => ({ ...s, step: -1 }), SwarmErrorCode.MALFORMED_MESSAGE, /step -1/],
    [
      "a missing slot",
      (s) => ({ ...s, slots: { m: s.slots.m ?? new Float32Array() } }),
      SwarmErrorCode.MALFORMED_MESSAGE,
      /slots m and v/,
    ],
    [
      "a short slot",
      (s) => ({ ...s, slots: { ...s.slots, v: new Float32Array(3) } }),
      SwarmErrorCode.LENGTH_MISMATCH,
      /slot v has 3 elements/,
    ],
    [
      "a NaN",
      (s) => ({ ...s, slots: { ...s.slots, m: new Float32Array(layout.size).fill(Number.NaN) } }),
      SwarmErrorCode.MALFORMED_MESSAGE,
      /element 0 has m=NaN/,
    ],
    [
      "a negative v",
      (s) => ({ ...s, slots: { ...s.slots, v: new Float32Array(layout.size).fill(-1) } }),
      SwarmErrorCode.MALFORMED_MESSAGE,
      /v ≥ 0/,
    ],
  ])("rejects a state with %s and keeps its own", (_what, corrupt, code, message) => {
    const adam = createFlatOptimizer(configs[0], layout);
    adam.importState(good());
    const bad = corrupt(good());
    expect(() => {
      adam.importState(bad);
    }).toThrow(expect.objectContaining({ code }));
    expect(() => {
      adam.importState(bad);
    }).toThrow(message);
    expect(adam.exportState()).toEqual(good());
  });

  it("rejects vectors that do not fit the layout, and bad learning rates", () => {
    const adam = createFlatOptimizer(configs[0], layout);
    const ok = new Float32Array(layout.size);
    expect(() => {
      adam.step(new Float32Array(2), ok, 0.1);
    }).toThrow(expect.objectContaining({ code: SwarmErrorCode.LENGTH_MISMATCH }));
    expect(() => {
      adam.step(ok, new Float32Array(layout.size + 1), 0.1);
    }).toThrow(/gradient vector has 41/);
    expect(() => {
      adam.step(ok, ok, Number.NaN);
    }).toThrow(/learning rate NaN/);
    expect(adam.stepCount).toBe(0);
  });
});

describe("integerPower", () => {
  it("agrees with Math.pow", () => {
    expect(integerPower(0.5, 10)).toBe(1 / 1024);
    expect(integerPower(3, 0)).toBe(1);
    for (const t of [1, 2, 7, 100, 12345]) expect(integerPower(0.999, t)).toBeCloseTo(Math.pow(0.999, t), 12);
  });
});
