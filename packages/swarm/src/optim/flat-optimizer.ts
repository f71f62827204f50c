/**
 * An optimizer's state for state sharing: its name, how many steps it has taken, and its named
 * per-element slots (Adam and LAMB: "m" and "v"), each as long as the parameter vector.
 * Same shape as `TrainingOptimizerState` in state/training-state.ts.
 */
export interface OptimizerState {
  name: string;
  step: number;
  slots: Record<string, Float32Array>;
}

/**
 * An optimizer over one flat float32 parameter vector. It is framework-agnostic (the TF.js glue
 * flattens weights and gradients into the layout) and deterministic: the same parameters, gradient,
 * learning rate and state give the same bits on every peer, which keeps the swarm's replicas identical.
 */
export interface FlatOptimizer {
  readonly name: "adam" | "lamb" | "sgd";
  /** Steps taken so far (drives bias correction). */
  readonly stepCount: number;
  /** Updates `parameters` in place from `gradient`; throws LENGTH_MISMATCH when a length is wrong. */
  step(parameters: Float32Array, gradient: Float32Array, learningRate: number): void;
  /** A copy of the state; later steps do not change it. */
  exportState(): OptimizerState;
  /** Replaces the state with a copy of `state`, after checking it; throws MALFORMED_MESSAGE/LENGTH_MISMATCH. */
  importState(state: OptimizerState): void;
}
