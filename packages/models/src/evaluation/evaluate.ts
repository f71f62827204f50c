import type { MetricName } from "@barnraise/protocol";
import type { Batch } from "../models/batch.ts";
import type { TrainableModel } from "../models/trainable-model.ts";
import { yieldToEvents } from "../yield-to-events.ts";

export interface Evaluation {
  /** Mean loss over all predictions scored. */
  readonly loss: number;
  /** Share of correct predictions; NaN for a regression. */
  readonly accuracy: number;
  readonly predictions: number;
  /** An uploaded model's metrics (its config's `model.metrics`), each a mean over all predictions. */
  readonly metrics?: Readonly<Partial<Record<MetricName, number>>>;
}

/**
 * Scores the model at `parameters` on every batch of `batches` (a held-out split), weighting each
 * batch by the predictions it scored. Yields to the event loop between batches so the swarm keeps
 * answering its peers.
 */
export async function evaluateModel(
  model: TrainableModel,
  parameters: Float32Array,
  batches: AsyncIterable<Batch>,
  signal?: AbortSignal,
): Promise<Evaluation> {
  model.setParameters(parameters);
  let lossSum = 0;
  let correct = 0;
  let predictions = 0;
  let metricSums: Partial<Record<MetricName, number>> | undefined;
  for await (const batch of batches) {
    signal?.throwIfAborted();
    const result = await model.evaluate(batch);
    lossSum += result.loss * result.predictions;
    correct += result.accuracy * result.predictions;
    predictions += result.predictions;
    if (result.metrics !== undefined) {
      metricSums ??= {};
      for (const [name, value] of Object.entries(result.metrics) as [MetricName, number][]) {
        metricSums[name] = (metricSums[name] ?? 0) + value * result.predictions;
      }
    }
    await yieldToEvents();
  }
  if (predictions === 0) throw new Error("the evaluation split has no predictions to score");
  const evaluation = { loss: lossSum / predictions, accuracy: correct / predictions, predictions };
  if (metricSums === undefined) return evaluation;
  const metrics: Partial<Record<MetricName, number>> = {};
  for (const [name, sum] of Object.entries(metricSums) as [MetricName, number][])
    metrics[name] = sum / predictions;
  // Perplexity is exp of the mean loss over all tokens, not the mean of each batch's exp.
  if (metrics.perplexity !== undefined) metrics.perplexity = Math.exp(evaluation.loss);
  return { ...evaluation, metrics };
}
