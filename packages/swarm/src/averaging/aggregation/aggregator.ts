/**
 * How a reducer combines the contributions to one chunk of its part into the values it sends back
 * to the group. Chosen once per run from the experiment config (`createAggregator`); every member
 * of a group must use the same.
 */
export interface Aggregator {
  /**
   * The aggregate of `points` (one per contributor, all as long as the chunk, in member order) with
   * their positive `weights` (already capped, see `ReducerSessionOptions.maxWeightRatio`). Pure:
   * the same input gives the same bits on every peer.
   */
  aggregate(points: readonly Float32Array[], weights: readonly number[]): Float32Array;
}
