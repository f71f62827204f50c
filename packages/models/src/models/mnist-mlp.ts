import * as tf from "@tensorflow/tfjs-core";
import { modelTensors, type ModelConfig } from "@barnraise/protocol";
import type { ParameterLayout } from "@barnraise/swarm";
import type { Batch } from "./batch.ts";
import { IMAGE_PIXELS, checkImageBatch } from "./batch-checks.ts";
import { activate, dense, lossAndAccuracy, softmaxCrossEntropy } from "./layer-ops.ts";
import { checkSeed } from "./model-error.ts";
import type { EvaluationResult, GradientResult, TrainableModel } from "./trainable-model.ts";
import { type ParameterSpec, VariableSet } from "./variable-set.ts";
import type { ModelKind } from "./model-kind.ts";
import { mnistMlpKind } from "./mnist-mlp-kind.ts";

/** The `model` part of a config with preset "mnist-mlp". */
export type MnistMlpConfig = Extract<ModelConfig, { kind: "mnist-mlp" }>;

/**
 * The parameters of the MNIST multilayer perceptron 784 → hiddenUnits… → 10, in the protocol's
 * layout order (`modelTensors`): `hidden0.kernel` [784, h0], `hidden0.bias` [h0], …, then
 * `output.kernel` [h_last, 10], `output.bias` [10]. Kernels before ReLU/GELU use He initialization
 * (normal, std √(2/fanIn)); before tanh and at the output, Glorot uniform (±√(6/(fanIn+fanOut)));
 * biases start at zero.
 */
export function mnistMlpParameterSpecs(config: MnistMlpConfig): ParameterSpec[] {
  return modelTensors(config).map(({ name, shape }): ParameterSpec => {
    const [fanIn = 0, fanOut = 0] = shape;
    if (shape.length === 1) return { name, shape, init: { kind: "zeros" } };
    const glorot = name.startsWith("output.") || config.activation === "tanh";
    return {
      name,
      shape,
      init: glorot
        ? { kind: "uniform", limit: Math.sqrt(6 / (fanIn + fanOut)) }
        : { kind: "normal", std: Math.sqrt(2 / fanIn) },
    };
  });
}

/**
 * The "mnist-mlp" kind: a dense network on flattened 28×28 digits, trained with softmax
 * cross-entropy. It has no dropout, so `computeGradients` ignores its seed (but still checks it).
 */
export class MnistMlp implements TrainableModel {
  readonly config: MnistMlpConfig;
  readonly kind: ModelKind;
  readonly layout: ParameterLayout;
  readonly #parameters: VariableSet;
  readonly #layers: { kernel: tf.Variable; bias: tf.Variable }[];

  constructor(config: MnistMlpConfig) {
    this.config = config;
    this.kind = mnistMlpKind(config);
    this.#parameters = new VariableSet(mnistMlpParameterSpecs(config));
    this.layout = this.#parameters.layout;
    const prefixes = config.hiddenUnits.map((_, i) => `hidden${i}`).concat("output");
    this.#layers = prefixes.map((prefix) => ({
      kernel: this.#parameters.get(`${prefix}.kernel`),
      bias: this.#parameters.get(`${prefix}.bias`),
    }));
  }

  initialParameters(seed: number): Float32Array {
    return this.#parameters.initialParameters(seed);
  }

  setParameters(parameters: Float32Array): void {
    this.#parameters.assign(parameters);
  }

  computeGradients(batch: Batch, seed: number): Promise<GradientResult> {
    // Bad input throws here, before any promise: only the computation is asynchronous.
    this.#parameters.checkAlive();
    checkSeed(seed, "dropout seed");
    const images = checkImageBatch(batch);
    return this.#parameters
      .lossAndGradient(() => softmaxCrossEntropy(this.#logits(images.pixels, images.size), images.labels))
      .then(({ loss, gradient }) => ({ loss, samples: images.size, gradient }));
  }

  evaluate(batch: Batch): Promise<EvaluationResult> {
    this.#parameters.checkAlive();
    const images = checkImageBatch(batch);
    return lossAndAccuracy(() => this.#logits(images.pixels, images.size), images.labels).then(
      ({ loss, correct }) => ({ loss, accuracy: correct / images.size, predictions: images.size }),
    );
  }

  dispose(): void {
    this.#parameters.dispose();
  }

  /** Logits [size, 10]; allocates tensors, so call inside a tidy scope. */
  #logits(pixels: Float32Array, size: number): tf.Tensor2D {
    let x = tf.tensor2d(pixels, [size, IMAGE_PIXELS]);
    this.#layers.forEach(({ kernel, bias }, index) => {
      x = dense(x, kernel, bias);
      if (index + 1 < this.#layers.length) x = activate(x, this.config.activation);
    });
    return x;
  }
}
