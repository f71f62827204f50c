import type { ModelConfig } from "@barnraise/protocol";
import type { ParameterLayout } from "@barnraise/swarm";
import type { Batch } from "./batch.ts";

/** One minibatch's forward and backward pass. */
export interface GradientResult {
  /** Mean loss over the batch's predictions. */
  readonly loss: number;
  /** Samples in the batch (sentences for the masked LM). */
  readonly samples: number;
  /** Mean gradient over the batch, flat in `layout` order, length `layout.size`. */
  readonly gradient: Float32Array;
}

export interface EvaluationResult {
  readonly loss: number;
  /** Share of correct predictions: digits, or masked tokens for the masked LM. */
  readonly accuracy: number;
  /** Predictions scored: images, or masked tokens. */
  readonly predictions: number;
}

/**
 * A model preset as the training loop sees it: parameters live in TF.js variables, and cross to
 * the swarm engine as one flat Float32Array in `layout` order (parameters, gradients and optimizer
 * moments all use that layout). The collaborative optimizer owns the parameter values; the model
 * only computes with them.
 */
export interface TrainableModel {
  readonly config: ModelConfig;
  readonly layout: ParameterLayout;
  /**
   * Deterministic initial parameters: the same bits for the same config and seed on every machine
   * and backend (drawn in JavaScript from a seeded generator, not by TF.js).
   */
  initialParameters(seed: number): Float32Array;
  /** Copies a flat vector (length `layout.size`) into the model's variables. */
  setParameters(parameters: Float32Array): void;
  /**
   * Forward and backward at the current parameters; dropout (if any) is drawn from `seed`. Bad
   * input throws at once; the values are read back asynchronously (GPU backends cannot read
   * synchronously in Node).
   */
  computeGradients(batch: Batch, seed: number): Promise<GradientResult>;
  /** Forward only, no dropout; asynchronous like computeGradients. */
  evaluate(batch: Batch): Promise<EvaluationResult>;
  /** Frees every tensor the model holds. */
  dispose(): void;
}
