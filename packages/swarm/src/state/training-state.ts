/**
 * Everything a peer needs to rejoin training at an epoch: the flat parameter vector and the
 * optimizer's state. It is what state sharing downloads from up-to-date donors (DESIGN §4), and
 * what a checkpoint holds.
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
  /**
   * The run's generation (how many times the organizer rolled it back) this state's lineage
   * belongs to; absent means 0. A state of another generation than the run's is stale.
   */
  generation?: number;
  /** The run's sample counter: Σ total weight (samples) of every applied step; absent means 0. */
  samples?: number;
  /** The experiment config version the state was trained under, when known. */
  configVersion?: number;
}

/** The optimizer part of a `TrainingState`: its name ("lamb", "adam" …), step count and named slots (moments …). */
export interface TrainingOptimizerState {
  name: string;
  step: number;
  slots: Record<string, Float32Array>;
}
