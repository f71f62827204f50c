/**
 * Everything a peer needs to rejoin training at an epoch: the flat parameter vector and the
 * optimizer's state. It is what state sharing downloads from up-to-date donors (DESIGN §4).
 *
 * `optimizer` has the same shape as the collaborative optimizer's `OptimizerState`
 * (`{ name, step, slots }`), so a donor can hand its optimizer's state over without copying.
 */
export interface TrainingState {
  /** The collaborative epoch (global optimizer step) this state belongs to. */
  epoch: number;
  /** All model parameters, flattened. */
  parameters: Float32Array;
  optimizer: TrainingOptimizerState;
}

/** The optimizer part of a `TrainingState`: its name ("lamb", "adam" …), step count and named slots (moments …). */
export interface TrainingOptimizerState {
  name: string;
  step: number;
  slots: Record<string, Float32Array>;
}
