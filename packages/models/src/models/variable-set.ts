import * as tf from "@tensorflow/tfjs-core";
import { ParameterLayout } from "@barnraise/swarm";
import { ModelError, ModelErrorCode } from "./model-error.ts";
import "./tfjs-gradients.ts";
import { checkSeed } from "./model-error.ts";
import { SeededRandom, hashName } from "../seeded-random.ts";

/** How one tensor's initial values are drawn (see `SeededRandom` for the normal approximation). */
export type Initializer =
  | { readonly kind: "zeros" }
  | { readonly kind: "ones" }
  | { readonly kind: "normal"; readonly std: number }
  /** Normal with standard deviation `std`, redrawn outside ±2·std (BERT/ALBERT's initializer). */
  | { readonly kind: "truncated-normal"; readonly std: number }
  | { readonly kind: "uniform"; readonly limit: number };

/** One named parameter tensor of a model. */
export interface ParameterSpec {
  readonly name: string;
  readonly shape: readonly number[];
  readonly init: Initializer;
}

/**
 * A model's parameters as named, trainable `tf.Variable`s in a fixed order, and the bridge to the
 * swarm's one flat Float32Array: the layout lists the tensors in exactly the order of `specs`,
 * each row-major. Every method leaves `tf.memory().numTensors` unchanged.
 */
export class VariableSet {
  readonly layout: ParameterLayout;
  readonly specs: readonly ParameterSpec[];
  readonly #variables: tf.Variable[];
  readonly #byName = new Map<string, tf.Variable>();
  #disposed = false;

  /** Creates one zero-filled variable per spec; call `assign` with real values before use. */
  constructor(specs: readonly ParameterSpec[]) {
    this.layout = ParameterLayout.fromShapes(specs);
    this.specs = specs;
    this.#variables = specs.map((spec) => {
      const zeros = tf.zeros([...spec.shape]);
      // Unnamed: TF.js names must be unique per process, and a process may hold several models.
      const variable = tf.variable(zeros, true);
      zeros.dispose();
      this.#byName.set(spec.name, variable);
      return variable;
    });
  }

  /** The variable of the tensor called `name`; throws INVALID_CONFIG for an unknown name. */
  get(name: string): tf.Variable {
    const variable = this.#byName.get(name);
    if (variable === undefined) {
      throw new ModelError(ModelErrorCode.INVALID_CONFIG, `the model has no parameter named "${name}"`);
    }
    return variable;
  }

  /** Draws every tensor from its own seeded stream (seed × tensor name), in layout order. */
  initialParameters(seed: number): Float32Array {
    checkSeed(seed, "initialization seed");
    const out = new Float32Array(this.layout.size);
    this.specs.forEach((spec, index) => {
      const slot = this.layout.slots[index];
      if (slot === undefined) return;
      fill(out.subarray(slot.offset, slot.offset + slot.length), spec.init, seed, spec.name);
    });
    return out;
  }

  /** Copies `parameters` (length `layout.size`) into the variables; the caller keeps its array. */
  assign(parameters: Float32Array): void {
    this.checkAlive();
    assignFlat(this.#variables, this.layout, parameters);
  }

  /**
   * Runs `loss` under `tf.variableGrads` and returns its value and the gradient of every variable,
   * concatenated in layout order (zeros for tensors the loss does not depend on).
   */
  async lossAndGradient(loss: () => tf.Scalar): Promise<{ loss: number; gradient: Float32Array }> {
    this.checkAlive();
    return await flatLossAndGradient(this.#variables, loss);
  }

  /** Disposes every variable; later calls throw DISPOSED. Idempotent. */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    for (const variable of this.#variables) variable.dispose();
    this.#byName.clear();
  }

  /** Throws DISPOSED after `dispose()`. */
  checkAlive(): void {
    if (this.#disposed) {
      throw new ModelError(
        ModelErrorCode.DISPOSED,
        "the model was disposed; create a new one with createModel",
      );
    }
  }
}

/**
 * Copies `parameters` (length `layout.size`) into `variables`, which are the layout's tensors in
 * its order; the caller keeps its array.
 */
export function assignFlat(
  variables: readonly tf.Variable[],
  layout: ParameterLayout,
  parameters: Float32Array,
): void {
  layout.check(parameters, "parameters");
  variables.forEach((variable, index) => {
    const slot = layout.slots[index];
    if (slot === undefined) return;
    // slice, not subarray: the CPU backend keeps the array it is given, so it must be our own copy.
    const values = parameters.slice(slot.offset, slot.offset + slot.length);
    tf.tidy(() => {
      variable.assign(tf.tensor(values, variable.shape, "float32"));
    });
  });
}

/**
 * Runs `loss` under `tf.variableGrads` and returns its value and the gradient of each of
 * `variables`, flattened and concatenated in their order (zeros for those the loss does not
 * depend on). The values are read back asynchronously: a GPU backend (WebGPU) cannot read
 * synchronously in Node.
 */
export async function flatLossAndGradient(
  variables: readonly tf.Variable[],
  loss: () => tf.Scalar,
): Promise<{ loss: number; gradient: Float32Array }> {
  const { value, flat } = tf.tidy(() => {
    const result = tf.variableGrads(loss, [...variables]);
    const parts = variables.map((variable) => {
      const grad = result.grads[variable.name];
      return grad === undefined ? tf.zeros([variable.size]) : tf.reshape(grad, [-1]);
    });
    return { value: result.value, flat: tf.concat(parts) };
  });
  try {
    // One read-back for the whole vector (one GPU sync instead of one per tensor), then a copy we own.
    const [gradient, lossValue] = await Promise.all([flat.data(), value.data()]);
    return { loss: lossValue[0] ?? NaN, gradient: new Float32Array(gradient) };
  } finally {
    value.dispose();
    flat.dispose();
  }
}

function fill(target: Float32Array, init: Initializer, seed: number, name: string): void {
  if (init.kind === "zeros") return;
  if (init.kind === "ones") {
    target.fill(1);
    return;
  }
  const random = new SeededRandom(seed, hashName(name));
  for (let i = 0; i < target.length; i++) {
    if (init.kind === "normal") target[i] = random.nextNormal() * init.std;
    else if (init.kind === "truncated-normal") target[i] = random.nextTruncatedNormal(init.std);
    else target[i] = (2 * random.nextFloat() - 1) * init.limit;
  }
}
