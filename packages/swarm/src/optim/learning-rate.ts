/**
 * The learning rate of collaborative step `step` (0-based, the epoch being applied): a linear warm-up
 * that reaches `baseRate` at step `warmupSteps − 1` — base·(step + 1)/warmupSteps, so the first step
 * already moves the weights — and stays constant afterwards. `warmupSteps` 0 means no warm-up.
 * Plain IEEE arithmetic, so every peer computes the same rate.
 */
export function warmupLearningRate(baseRate: number, warmupSteps: number, step: number): number {
  if (step >= warmupSteps) return baseRate;
  return (baseRate * (step + 1)) / warmupSteps;
}
