import type { FlatOptimizer, OptimizerState } from "./flat-optimizer.ts";
import { AdamMoments, checkStepInputs, integerPower, type AdamHyperParameters } from "./adam.ts";
import type { ParameterLayout } from "./parameter-layout.ts";

/** LAMB's hyper-parameters: Adam's plus the upper bound of the trust ratio. */
export interface LambHyperParameters extends AdamHyperParameters {
  readonly maxTrustRatio: number;
}

/**
 * LAMB (You et al. 2019), the large-batch optimizer DeDLOC trains with. Per tensor: the Adam direction
 * with bias correction plus weight decay, u = m̂/(√v̂ + ε) + λ·w, is scaled by the trust ratio
 * ‖w‖/‖u‖ clipped to [0, maxTrustRatio] (1 when either norm is 0), and w ← w − lr·ratio·u.
 * Norms are summed in float64 in index order, so every peer gets the same bits.
 */
export class LambOptimizer implements FlatOptimizer {
  readonly name = "lamb";
  readonly #moments: AdamMoments;
  readonly #hyper: LambHyperParameters;
  readonly #layout: ParameterLayout;
  /** The update u of the tensor being processed, kept in float64 between the norm and the apply pass. */
  readonly #update: Float64Array;
  readonly #trustRatios: Float64Array;

  constructor(hyper: LambHyperParameters, layout: ParameterLayout) {
    this.#hyper = { ...hyper };
    this.#layout = layout;
    this.#moments = new AdamMoments(this.name, layout);
    this.#update = new Float64Array(layout.largestSlot);
    this.#trustRatios = new Float64Array(layout.slots.length);
  }

  get stepCount(): number {
    return this.#moments.step;
  }

  /** The trust ratio each tensor (in layout order) got in the last step; for logs and tests. */
  get trustRatios(): readonly number[] {
    return Array.from(this.#trustRatios);
  }

  step(parameters: Float32Array, gradient: Float32Array, learningRate: number): void {
    checkStepInputs(this.#layout, parameters, gradient, learningRate);
    const { beta1, beta2, epsilon, weightDecay, maxTrustRatio } = this.#hyper;
    const { m, v } = this.#moments;
    const update = this.#update;
    const t = this.#moments.step + 1;
    const correction1 = 1 - integerPower(beta1, t);
    const correction2 = 1 - integerPower(beta2, t);
    const keep1 = 1 - beta1;
    const keep2 = 1 - beta2;
    const slots = this.#layout.slots;
    for (const [s, { offset, length }] of slots.entries()) {
      let weightNorm2 = 0;
      let updateNorm2 = 0;
      for (let j = 0; j < length; j++) {
        const i = offset + j;
        const g = gradient[i] ?? 0;
        const w = parameters[i] ?? 0;
        const mi = beta1 * (m[i] ?? 0) + keep1 * g;
        const vi = beta2 * (v[i] ?? 0) + keep2 * g * g;
        m[i] = mi;
        v[i] = vi;
        const u = mi / correction1 / (Math.sqrt(vi / correction2) + epsilon) + weightDecay * w;
        update[j] = u;
        weightNorm2 += w * w;
        updateNorm2 += u * u;
      }
      const weightNorm = Math.sqrt(weightNorm2);
      const updateNorm = Math.sqrt(updateNorm2);
      const ratio = weightNorm > 0 && updateNorm > 0 ? Math.min(weightNorm / updateNorm, maxTrustRatio) : 1;
      this.#trustRatios[s] = ratio;
      const scale = learningRate * ratio;
      for (let j = 0; j < length; j++) {
        const i = offset + j;
        parameters[i] = (parameters[i] ?? 0) - scale * (update[j] ?? 0);
      }
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
