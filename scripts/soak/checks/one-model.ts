import { incarnationId, type CheckResult, type PeerHistory } from "../types.ts";
import { iso } from "./format.ts";

export interface OneModelInput {
  readonly peers: readonly PeerHistory[];
  /** The moments to judge (Unix ms): the soak's 5-s samples. */
  readonly sampleTimes: readonly number[];
  /** The aux's "the swarm has split: …" warnings. */
  readonly auxSplitWarnings: readonly string[];
  /** Samples at which the platform's experiment view showed a split. */
  readonly platformSplitSamples: number;
}

/**
 * A private step dropped on return is healed this soon: the peer loads the swarm's state within this
 * time after its step line (0.4 s was seen after an aux restart), and before its next step.
 */
export const PRIVATE_STEP_HEAL_MS = 2_000;

/**
 * At every sample: among the peers running then whose latest status has no swarmNote, those whose
 * latest step line has the highest step must all have logged the same stateDigest for it. A peer
 * that loaded the swarm's state after its latest step line, before stepping again, holds a donor's
 * state, not the one its step made (a private step dropped on return, as after an aux restart): it
 * is not compared, from the step line on when the load came within PRIVATE_STEP_HEAL_MS of it (a
 * 30-minute soak sampled one such step in the 0.4 s before its load), else from the load on.
 */
export function checkOneModel(input: OneModelInput): CheckResult {
  let compared = 0;
  const violations: string[] = [];
  for (const time of input.sampleTimes) {
    const states = input.peers.flatMap((peer) => {
      const { startedAt, endedAt } = peer.incarnation;
      if (startedAt > time || (endedAt !== null && endedAt <= time)) return [];
      const status = lastAtOrBefore(peer.statuses, time);
      if (status?.swarmNote != null) return [];
      const step = lastAtOrBefore(peer.steps, time);
      if (step === undefined) return [];
      const next = peer.steps.find((line) => line.time > step.time);
      const dropped = (peer.stateLoads ?? []).some(
        (load) =>
          load.time >= step.time &&
          (next === undefined || load.time <= next.time) &&
          (load.time <= time || load.time - step.time <= PRIVATE_STEP_HEAL_MS),
      );
      if (dropped) return [];
      return [{ peer: incarnationId(peer.incarnation), line: step }];
    });
    if (states.length === 0) continue;
    const top = Math.max(...states.map((state) => state.line.step));
    const atTop = states.filter((state) => state.line.step === top);
    if (atTop.length < 2) continue;
    compared += 1;
    const digests = new Set(atTop.map((state) => state.line.stateDigest));
    if (digests.size > 1) {
      const groups = atTop.map((state) => `${state.peer} ${state.line.stateDigest}`).join(", ");
      violations.push(`at ${iso(time)}, step ${top}: ${groups}`);
    }
  }
  return {
    name: "one model",
    pass: violations.length === 0,
    summary:
      `${input.sampleTimes.length} samples, ${compared} with ≥ 2 trainers at the top step, ${violations.length} with two digests; ` +
      `aux split warnings: ${input.auxSplitWarnings.length}; platform showed a split in ${input.platformSplitSamples} samples`,
    details: [...violations, ...input.auxSplitWarnings.map((line) => `note: aux: ${line}`)],
  };
}

function lastAtOrBefore<T extends { readonly time: number }>(
  lines: readonly T[],
  time: number,
): T | undefined {
  let found: T | undefined;
  for (const line of lines) {
    if (line.time > time) break;
    found = line;
  }
  return found;
}
