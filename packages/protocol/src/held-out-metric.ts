import { isLanguageModelTask, UPLOADED_MODEL, ModelTask, type ModelConfig } from "./experiment-config.ts";

/**
 * The figure a checkpoint's held-out evaluation reports (the aux scores every checkpoint on the
 * dataset's test split and the platform charts it): what the model's task is judged by.
 * - `accuracy`: the share of test rows a classifier gets right, in [0, 1];
 * - `perplexity`: exp(mean cross-entropy over the predicted tokens) of a language model (the masked
 *   LM preset, an uploaded next-token or masked-tokens model), ≥ 1;
 * - `mae`: the mean absolute error of a regression over the test rows, ≥ 0.
 */
export const HeldOutMetric = { accuracy: "accuracy", perplexity: "perplexity", mae: "mae" } as const;
export type HeldOutMetric = (typeof HeldOutMetric)[keyof typeof HeldOutMetric];

/** Every held-out metric, e.g. for an enum in a schema. */
export const HELD_OUT_METRICS = [
  HeldOutMetric.accuracy,
  HeldOutMetric.perplexity,
  HeldOutMetric.mae,
] as const;

/**
 * The held-out metric of a model config: accuracy for the digit classifier and uploaded
 * classifiers, perplexity for the language models, the mean absolute error for an uploaded regression.
 * Both the aux (which computes it) and the platform (which refuses any other) call this.
 */
export function heldOutMetricOf(model: ModelConfig): HeldOutMetric {
  switch (model.kind) {
    case "mnist-mlp":
      return HeldOutMetric.accuracy;
    case "albert-mlm":
      return HeldOutMetric.perplexity;
    case UPLOADED_MODEL:
      if (isLanguageModelTask(model.task)) return HeldOutMetric.perplexity;
      return model.task === ModelTask.regression ? HeldOutMetric.mae : HeldOutMetric.accuracy;
  }
}
