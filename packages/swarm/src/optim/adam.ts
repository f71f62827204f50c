import { SwarmError, SwarmErrorCode } from "../errors.ts";
import type { FlatOptimizer, OptimizerState } from "./flat-optimizer.ts";
import type { ParameterLayout } from "./parameter-layout.ts";

/** Adam's hyper-parameters (the learning rate comes with each step, from the schedule). */
export interface AdamHyperParameters {
  readonly beta1: number;
  readonly beta2: number;
  readonly epsilon: number;
  /** Decoupled (AdamW) weight decay; 0 turns it off. */
  readonly weightDecay: number;
}

/**
 * `base` to the power `exponent` (a non-negative integer) by repeated squaring. Only IEEE
 * multiplications, so every JavaScript engine gives the same bits; `Math.pow` is only approximated
 * by the spec and may differ between browsers, which would make peers' bias corrections disagree.
 */
export function integerPower(base: number, exponent: number): number {
  let result = 1;
  let square = base;
  let remaining = exponent;
  while (remaining > 0) {
    if (remaining % 2 === 1) result *= square;
    square *= square;
    remaining = Math.floor(remaining / 2);
  }
  return result;
}

/** Throws unless both vectors match the layout and the learning rate is a finite number ≥ 0. */
export function checkStepInputs(
  layout: ParameterLayout,
  parameters: Float32Array,
  gradient: Float32Array,
  learningRate: number,
): void {
  layout.check(parameters, "parameter vector");
  layout.check(gradient, "gradient vector");
  if (!Number.isFinite(learningRate) || learningRate < 0) {
    throw new SwarmError(
      SwarmErrorCode.MALFORMED_MESSAGE,
      `learning rate ${learningRate} is not a finite number ≥ 0`,
    );
  }
}

/**
 * Adam's first and second moment estimates (slots "m" and "v", float32 like the parameters) and step
 * count. Adam and LAMB share it; it also moves the state in and out for state sharing.
 */
export class AdamMoments {
  readonly m: Float32Array;
  readonly v: Float32Array;
  step = 0;
  readonly #name: string;
  readonly #layout: ParameterLayout;

  constructor(name: string, layout: ParameterLayout) {
    this.#name = name;
    this.#layout = layout;
    this.m = new Float32Array(layout.size);
    this.v = new Float32Array(layout.size);
  }

  /** A deep copy: later steps do not change it. */
  export(): OptimizerState {
    return { name: this.#name, step: this.step, slots: { m: this.m.slice(), v: this.v.slice() } };
  }

  /**
   * Replaces the moments with `state`, copying it. It may come from another peer, so everything is
   * checked before anything changes: the optimizer's name, the step count, the slots' names and lengths,
   * finite values, and a non-negative second moment.
   */
  import(state: OptimizerState): void {
    if (state.name !== this.#name) {
      throw new SwarmError(
        SwarmErrorCode.MALFORMED_MESSAGE,
        `optimizer state is for "${state.name}", this optimizer is "${this.#name}"`,
      );
    }
    if (!Number.isSafeInteger(state.step) || state.step < 0) {
      throw new SwarmError(
        SwarmErrorCode.MALFORMED_MESSAGE,
        `optimizer step ${state.step} is not an integer ≥ 0`,
      );
    }
    const names = Object.keys(state.slots).sort();
    if (names.length !== 2 || names[0] !== "m" || names[1] !== "v") {
      throw new SwarmError(
        SwarmErrorCode.MALFORMED_MESSAGE,
        `${this.#name} state must have slots m and v, got [${names.join(", ")}]`,
      );
    }
    const { m, v } = state.slots;
    if (m === undefined || v === undefined) {
      throw new SwarmError(SwarmErrorCode.MALFORMED_MESSAGE, `${this.#name} state must have slots m and v`);
    }
    this.#layout.check(m, `${this.#name} slot m`);
    this.#layout.check(v, `${this.#name} slot v`);
    for (let i = 0; i < m.length; i++) {
      const mi = m[i] ?? 0;
      const vi = v[i] ?? 0;
      if (!Number.isFinite(mi) || !Number.isFinite(vi) || vi < 0) {
        throw new SwarmError(
          SwarmErrorCode.MALFORMED_MESSAGE,
          `${this.#name} state at element ${i} has m=${mi}, v=${vi}; expected finite values and v ≥ 0`,
        );
      }
    }
    this.m.set(m);
    this.v.set(v);
    this.step = state.step;
  }
}

/**
 * Adam (Kingma & Ba) with bias correction and, when weightDecay > 0, AdamW's decoupled weight decay:
 * w ← w − lr·(m̂/(√v̂ + ε) + λ·w). Each element is computed in float64 in index order and rounded to
 * float32 once, so the same inputs give the same bits on every peer.
 */
export class AdamOptimizer implements FlatOptimizer {
  readonly name = "adam";
  readonly #moments: AdamMoments;
  readonly #hyper: AdamHyperParameters;
  readonly #layout: ParameterLayout;

  constructor(hyper: AdamHyperParameters, layout: ParameterLayout) {
    this.#hyper = { ...hyper };
    this.#layout = layout;
    this.#moments = new AdamMoments(this.name, layout);
  }

  get stepCount(): number {
    return this.#moments.step;
  }

  step(parameters: Float32Array, gradient: Float32Array, learningRate: number): void {
    checkStepInputs(this.#layout, parameters, gradient, learningRate);
    const { beta1, beta2, epsilon, weightDecay } = this.#hyper;
    const { m, v } = this.#moments;
    const t = this.#moments.step + 1;
    const correction1 = 1 - integerPower(beta1, t);
    const correction2 = 1 - integerPower(beta2, t);
    const keep1 = 1 - beta1;
    const keep2 = 1 - beta2;
    for (let i = 0; i < parameters.length; i++) {
      const g = gradient[i] ?? 0;
      const w = parameters[i] ?? 0;
      const mi = beta1 * (m[i] ?? 0) + keep1 * g;
      const vi = beta2 * (v[i] ?? 0) + keep2 * g * g;
      m[i] = mi;
      v[i] = vi;
      const direction = mi / correction1 / (Math.sqrt(vi / correction2) + epsilon);
      parameters[i] = w - learningRate * (direction + weightDecay * w);
    }
    this.#moments.step = t;
  }

  exportState(): OptimizerState {
    return this.#moments.export();
  }

  importState(state: OptimizerState): void {
    this.#moments.import(state);
  }
}
