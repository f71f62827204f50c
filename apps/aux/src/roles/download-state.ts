import type { Swarm, TrainingState } from "@barnraise/swarm";

/** The newest state at or after `minEpoch` from the trainers that accept connections. */
export async function downloadState(
  swarm: Swarm,
  minEpoch: number,
  generation: number,
  signal: AbortSignal,
): Promise<TrainingState> {
  const donors = swarm.stateDonors(minEpoch, generation);
  if (donors.length === 0) {
    throw new Error(`no trainer connected to this aux peer has reached step ${minEpoch} yet`);
  }
  return swarm.state.download({ donors, minEpoch, generation, signal });
}
