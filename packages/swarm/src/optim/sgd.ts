import type { ExperimentConfig } from "@barnraise/protocol";
import { SwarmError, SwarmErrorCode } from "../errors.ts";
import { checkStepInputs } from "./adam.ts";
import type { FlatOptimizer, OptimizerState } from "./flat-optimizer.ts";
import type { ParameterLayout } from "./parameter-layout.ts";

/** The outer optimizer's settings (`averaging.outerOptimizer` of the experiment config). */
export type SgdHyperParameters = Pick<
  ExperimentConfig["averaging"]["outerOptimizer"],
  "momentum" | "nesterov"
>;

/**
 * SGD with momentum, and Nesterov's look-ahead when `nesterov` is set (the form PyTorch uses, and
 * DiLoCo's outer optimizer): b ← μ·b + g, then w ← w − lr·(g + μ·b) with Nesterov or w ← w − lr·b
 * without. With μ = 0 both are plain SGD. Its one slot, "momentum", is the buffer b. Each element is
 * computed in float64 and rounded to float32 once, so every peer gets the same bits.
 */
export class SgdOptimizer implements FlatOptimizer {
  readonly name = "sgd";
  readonly #momentum: Float32Array;
  readonly #hyper: SgdHyperParameters;
  readonly #layout: ParameterLayout;
  #step = 0;

  constructor(hyper: SgdHyperParameters, layout: ParameterLayout) {
    if (!(hyper.momentum >= 0 && hyper.momentum < 1)) {
      throw new SwarmError(
        SwarmErrorCode.MALFORMED_MESSAGE,
        `SGD momentum ${hyper.momentum} is not in [0, 1)`,
      );
    }
    this.#hyper = { ...hyper };
    this.#layout = layout;
    this.#momentum = new Float32Array(layout.size);
  }

  get stepCount(): number {
    return this.#step;
  }

  step(parameters: Float32Array, gradient: Float32Array, learningRate: number): void {
    checkStepInputs(this.#layout, parameters, gradient, learningRate);
    const { momentum: mu, nesterov } = this.#hyper;
    const buffer = this.#momentum;
    for (let i = 0; i < parameters.length; i++) {
      const g = gradient[i] ?? 0;
      const b = mu * (buffer[i] ?? 0) + g;
      buffer[i] = b;
      const direction = nesterov ? g + mu * b : b;
      parameters[i] = (parameters[i] ?? 0) - learningRate * direction;
    }
    this.#step += 1;
  }

  exportState(): OptimizerState {
    return { name: this.name, step: this.#step, slots: { momentum: this.#momentum.slice() } };
  }

  /** Checks everything (name, step, the one slot, its length, finite values) before changing anything. */
  importState(state: OptimizerState): void {
    const malformed = (message: string) => new SwarmError(SwarmErrorCode.MALFORMED_MESSAGE, message);
    if (state.name !== this.name) {
      throw malformed(`optimizer state is for "${state.name}", this optimizer is "${this.name}"`);
    }
    if (!Number.isSafeInteger(state.step) || state.step < 0) {
      throw malformed(`optimizer step ${state.step} is not an integer ≥ 0`);
    }
    const names = Object.keys(state.slots);
    const momentum = state.slots.momentum;
    if (names.length !== 1 || momentum === undefined) {
      throw malformed(`sgd state must have the one slot momentum, got [${names.sort().join(", ")}]`);
    }
    this.#layout.check(momentum, "sgd slot momentum");
    const bad = momentum.findIndex((value) => !Number.isFinite(value));
    if (bad !== -1) throw malformed(`sgd momentum at element ${bad} is ${momentum[bad]}`);
    this.#momentum.set(momentum);
    this.#step = state.step;
  }
}
