import * as tf from "@tensorflow/tfjs-core";
import { isLanguageModelTask, LossName, MetricName, ModelTask, SPECIAL_TOKENS } from "@barnraise/protocol";
import { countCorrect, softmaxCrossEntropy } from "./layer-ops.ts";
import { ModelError, ModelErrorCode } from "./model-error.ts";

/**
 * The losses and metrics an organizer picks for an uploaded model, written with tfjs-core ops on
 * the model's outputs [rows, units] so that `tf.variableGrads` differentiates them like the
 * presets' losses. All allocate intermediates: call them inside `tf.tidy`.
 */

/** Keras's clip for probabilities, so that a confident wrong answer costs −log(1e-7), not Infinity. */
const PROBABILITY_EPSILON = 1e-7;

/**
 * How a classifier's outputs are read: a softmax layer gives probabilities; a linear one, logits
 * (the loss applies the softmax itself, which is the numerically stable way).
 */
export type ClassifierOutputs = "probabilities" | "logits";

/**
 * What the loss makes of a model's outputs: a classifier's classes, a regression's loss, or a
 * language model's vocabulary (a distribution over it at every position; the loss and metrics are
 * a classifier's, over the positions that predict a token).
 */
export type OutputReading =
  | { readonly task: "classification"; readonly outputs: ClassifierOutputs; readonly classes: number }
  | { readonly task: "regression"; readonly loss: "mean-squared-error" | "mean-absolute-error" }
  | {
      readonly task: "next-token" | "masked-tokens";
      readonly outputs: ClassifierOutputs;
      /** Token ids the model predicts: its output layer's units. */
      readonly vocabulary: number;
    };

/**
 * How to read a model's outputs, from the config's task and loss and the output layer's activation
 * and width. Throws MODEL_INVALID for a combination that cannot train: a classifier's output must
 * be softmax or linear with at least two units, a regression's a single unit, a language model's
 * softmax or linear with a unit per token (more than the special tokens).
 */
export function outputReading(
  task: ModelTask,
  loss: LossName,
  outputActivation: string,
  outputUnits: number,
): OutputReading {
  if (isLanguageModelTask(task)) {
    if (loss !== LossName.sparseCategoricalCrossentropy)
      throw invalid(`${loss} does not fit a language model`);
    const outputs = classifierOutputs(outputActivation, "a language model");
    if (outputUnits <= SPECIAL_TOKENS.length) {
      throw invalid(
        `a language model's output layer has a unit per token of the vocabulary; ${outputUnits} ` +
          `is not more than the ${SPECIAL_TOKENS.length} special tokens`,
      );
    }
    return { task, outputs, vocabulary: outputUnits };
  }
  if (task === ModelTask.classification) {
    if (loss !== LossName.sparseCategoricalCrossentropy) throw invalid(`${loss} does not fit a classifier`);
    const outputs = classifierOutputs(outputActivation, "a classifier");
    if (outputUnits < 2)
      throw invalid(`a classifier needs at least 2 output units, the model has ${outputUnits}`);
    return { task: "classification", outputs, classes: outputUnits };
  }
  if (loss !== LossName.meanSquaredError && loss !== LossName.meanAbsoluteError) {
    throw invalid(`${loss} does not fit a regression`);
  }
  if (outputUnits !== 1) {
    throw invalid(`a regression predicts one value per row, but the output layer has ${outputUnits} units`);
  }
  return { task: "regression", loss };
}

/** Softmax outputs are probabilities, linear ones logits; any other activation cannot be a distribution. */
function classifierOutputs(outputActivation: string, what: string): ClassifierOutputs {
  if (outputActivation !== "softmax" && outputActivation !== "linear") {
    throw invalid(
      `the output layer's activation is ${outputActivation}; ${what} trained with sparse ` +
        "categorical cross-entropy needs softmax (probabilities) or linear (logits) outputs",
    );
  }
  return outputActivation === "softmax" ? "probabilities" : "logits";
}

/**
 * The mean loss of `outputs` [predictions, units] against one label per prediction: a row's (a
 * classifier, a regression) or a predicted token's (a language model, its outputs at those
 * positions).
 */
export function outputLoss(reading: OutputReading, outputs: tf.Tensor2D, labels: Float32Array): tf.Scalar {
  if (reading.task !== "regression") {
    const ids = Int32Array.from(labels);
    if (reading.outputs === "logits") return softmaxCrossEntropy(outputs, ids);
    const units = reading.task === "classification" ? reading.classes : reading.vocabulary;
    const targets = tf.oneHot(tf.tensor1d(ids, "int32"), units);
    const logProbabilities = tf.log(tf.clipByValue(outputs, PROBABILITY_EPSILON, 1 - PROBABILITY_EPSILON));
    return tf.neg(tf.mean(tf.sum(tf.mul(logProbabilities, targets), -1))) as tf.Scalar;
  }
  const error = tf.sub(tf.reshape(outputs, [-1]), tf.tensor1d(labels));
  return tf.mean<tf.Scalar>(reading.loss === LossName.meanSquaredError ? tf.square(error) : tf.abs(error));
}

/**
 * What `evaluate` reports besides the loss, each a scalar tensor: the count of rows classified (or
 * tokens predicted) right, or the mean absolute and squared errors of a regression.
 */
export function outputMetrics(
  reading: OutputReading,
  outputs: tf.Tensor2D,
  labels: Float32Array,
): Partial<Record<MetricName | "correct", tf.Scalar>> {
  if (reading.task !== "regression") return { correct: countCorrect(outputs, Int32Array.from(labels)) };
  const error = tf.sub(tf.reshape(outputs, [-1]), tf.tensor1d(labels));
  return {
    [MetricName.meanAbsoluteError]: tf.mean<tf.Scalar>(tf.abs(error)),
    [MetricName.meanSquaredError]: tf.mean<tf.Scalar>(tf.square(error)),
  };
}

function invalid(what: string): ModelError {
  return new ModelError(ModelErrorCode.MODEL_INVALID, `the uploaded model cannot be trained: ${what}`);
}
