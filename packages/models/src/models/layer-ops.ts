import * as tf from "@tensorflow/tfjs-core";

/**
 * The few building blocks both presets are made of, written with tfjs-core ops only so that
 * `tf.variableGrads` differentiates them and no tfjs-layers state is involved. All take and return
 * 2-D tensors `[rows, features]`, and allocate intermediates: call them inside `tf.tidy`.
 */

/**
 * Rows `indices` of `params` (`tf.gather` along axis 0), differentiable on every backend. TF.js's
 * own gradient of gather is an UnsortedSegmentSum, which the WebAssembly backend does not have;
 * this one scatters the incoming gradient back with ScatterNd, which sums the rows of repeated
 * indices just the same (a token that occurs twice gets both gradients).
 */
export function gatherRows(params: tf.Tensor2D, indices: Int32Array): tf.Tensor2D {
  // customGrad passes the inputs and then the save function in one rest parameter.
  const gather = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
    const [input, save] = args;
    if (!(input instanceof tf.Tensor) || typeof save !== "function") {
      throw new TypeError("gatherRows: customGrad called with unexpected arguments");
    }
    const positions = tf.tensor1d(indices, "int32");
    // Saved, so the backward pass still has the indices after the forward pass's scope is gone.
    save([positions]);
    return {
      value: tf.gather(input, positions),
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const [kept] = saved;
        if (kept === undefined) throw new Error("gatherRows: the saved indices are missing");
        return tf.scatterND(tf.expandDims(kept, 1), dy, input.shape);
      },
    };
  });
  return gather(params) as tf.Tensor2D;
}

/** Activation functions a config may name. */
export type ActivationName = "relu" | "gelu" | "tanh";

const SQRT_2_OVER_PI = Math.sqrt(2 / Math.PI);

/** `x · kernel + bias` for `x` of shape [rows, in], `kernel` [in, out], `bias` [out]. */
export function dense(x: tf.Tensor2D, kernel: tf.Tensor, bias: tf.Tensor): tf.Tensor2D {
  return tf.add(tf.matMul(x, kernel as tf.Tensor2D), bias);
}

/** GELU, tanh approximation as in BERT and ALBERT: ½x(1 + tanh(√(2/π)(x + 0.044715x³))). */
export function gelu<T extends tf.Tensor>(x: T): T {
  const cubic = tf.mul(tf.mul(tf.mul(x, x), x), 0.044715);
  const inner = tf.mul(tf.add(x, cubic), SQRT_2_OVER_PI);
  return tf.mul(tf.mul(x, 0.5), tf.add(tf.tanh(inner), 1));
}

/** Applies the named activation. */
export function activate<T extends tf.Tensor>(x: T, name: ActivationName): T {
  if (name === "relu") return tf.relu(x);
  if (name === "tanh") return tf.tanh(x);
  return gelu(x);
}

/** Variance floor inside layer normalization; larger than BERT's 1e-12 because we compute in float32. */
export const LAYER_NORM_EPSILON = 1e-6;

/** Layer normalization over the last axis: (x − mean) / √(var + ε) · gain + bias. */
export function layerNorm(x: tf.Tensor2D, gain: tf.Tensor, bias: tf.Tensor): tf.Tensor2D {
  const mean = tf.mean(x, -1, true);
  const centered = tf.sub(x, mean);
  const variance = tf.mean(tf.square(centered), -1, true);
  const normalized = tf.mul(centered, tf.rsqrt(tf.add(variance, LAYER_NORM_EPSILON)));
  return tf.add(tf.mul(normalized, gain), bias);
}

/** Dropout with `rate` from `seed`; identity when `rate` is 0 or `seed` is undefined (evaluation). */
export function maybeDropout<T extends tf.Tensor>(x: T, rate: number, seed: number | undefined): T {
  if (rate === 0 || seed === undefined) return x;
  return tf.dropout(x, rate, undefined, seed) as T;
}

/**
 * Mean softmax cross-entropy of `logits` [rows, classes] against integer `labels` (one per row),
 * computed as −mean(log_softmax(logits)[row, label]).
 */
export function softmaxCrossEntropy(logits: tf.Tensor2D, labels: Int32Array): tf.Scalar {
  const classes = logits.shape[1];
  const targets = tf.oneHot(tf.tensor1d(labels, "int32"), classes);
  const picked = tf.sum(tf.mul(tf.logSoftmax(logits), targets), -1);
  return tf.neg(tf.mean(picked)) as tf.Scalar;
}

/** How many rows of `logits` have their largest value at the row's label (a scalar tensor). */
export function countCorrect(logits: tf.Tensor2D, labels: Int32Array): tf.Scalar {
  const predicted = tf.argMax(logits, -1);
  return tf.sum(tf.cast(tf.equal(predicted, tf.tensor1d(labels, "int32")), "int32"));
}

/**
 * Mean cross-entropy and correct predictions of `logits` against `labels`, read back
 * asynchronously (a GPU backend cannot read synchronously in Node). Disposes what it allocates;
 * `logits` stays the caller's.
 */
export async function lossAndAccuracy(
  logits: () => tf.Tensor2D,
  labels: Int32Array,
): Promise<{ loss: number; correct: number }> {
  const { loss, correct } = tf.tidy(() => {
    const computed = logits();
    return { loss: softmaxCrossEntropy(computed, labels), correct: countCorrect(computed, labels) };
  });
  try {
    const [lossValue, correctValue] = await Promise.all([loss.data(), correct.data()]);
    return { loss: lossValue[0] ?? NaN, correct: correctValue[0] ?? NaN };
  } finally {
    loss.dispose();
    correct.dispose();
  }
}
