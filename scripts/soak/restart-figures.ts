import type { CheckpointView } from "../../apps/web/src/api/schemas/public.ts";
import {
  incarnationId,
  type AuxHistory,
  type ChaosKind,
  type ChaosRecord,
  type PeerHistory,
  type StepLine,
} from "./types.ts";

/**
 * What each restart cost the swarm, from the peers' step lines:
 *
 * - highestBefore: the swarm's step just before the restart: the highest of the last steps logged
 *   before the moment the process was started again by the peers that were running when the action
 *   began (so an older timeline's steps do not count);
 * - resumedFrom: the step the swarm went on from: the first step line after the restart, less one
 *   (for a peer restart, the restarted peer's own first step);
 * - stepsLost: highestBefore − resumedFrom, 0 when none;
 * - secondsToSharedStep: from the restart to the first step taken together with others (shared, and
 *   the group's samples more than the peer's own) by any peer, or for a peer restart by that peer;
 * - auxBackSeconds (aux restarts): from the restart to the new aux's first step posted to the
 *   platform, null when it posted none (it did not get back into the swarm);
 * - checkpointBefore: the latest checkpoint's step (of the newest rollback generation) taken before
 *   the restart, which the swarm must not resume behind.
 */

export type RestartOutcome =
  /** A shared step followed (and, after an aux restart, the new aux posted a step). */
  | "resumed"
  /** The restarted process was stopped again within INTERRUPTED_WITHIN_MS, before that. */
  | "interrupted"
  /** Nothing followed: the restart was not survived. */
  | "never";

/** A restarted process stopped by the soak this soon after its start had no fair chance to step. */
export const INTERRUPTED_WITHIN_MS = 60_000;

export interface RestartFigure {
  readonly kind: ChaosKind;
  readonly target: string | null;
  /** When the restarted process was started again (Unix ms). */
  readonly at: number;
  readonly highestBefore: number | null;
  readonly resumedFrom: number | null;
  readonly stepsLost: number | null;
  readonly secondsToSharedStep: number | null;
  readonly auxBackSeconds: number | null;
  readonly checkpointBefore: number | null;
  readonly outcome: RestartOutcome;
}

export interface RestartFiguresInput {
  readonly chaos: readonly ChaosRecord[];
  readonly peers: readonly PeerHistory[];
  readonly checkpoints: readonly CheckpointView[];
  readonly auxRuns: readonly AuxHistory[];
}

export function restartFigures({ chaos, peers, checkpoints, auxRuns }: RestartFiguresInput): RestartFigure[] {
  const everyStep = peers.flatMap((peer) => peer.steps);
  return chaos.flatMap((record): RestartFigure[] => {
    const at = record.restartedAt;
    if (at === null) return [];
    const restartedPeer =
      record.kind === "peer-kill" || record.kind === "peer-interrupt"
        ? peers.find((peer) => record.started.includes(incarnationId(peer.incarnation)))
        : undefined;
    const after = (restartedPeer === undefined ? everyStep : restartedPeer.steps)
      .filter((line) => line.time >= at)
      .sort((a, b) => a.time - b.time);
    const highestBefore = maxOf(
      peers.flatMap((peer) => {
        const { startedAt, endedAt } = peer.incarnation;
        if (startedAt > record.startedAt || (endedAt !== null && endedAt < record.startedAt)) return [];
        const last = peer.steps.filter((line) => line.time < at).at(-1);
        return last === undefined ? [] : [last.step];
      }),
    );
    const first = after[0];
    const resumedFrom = first === undefined ? null : first.step - 1;
    const shared = after.find(isSharedStep);
    const restartedAux =
      record.kind === "aux-restart"
        ? auxRuns.find((aux) => record.started.includes(incarnationId(aux.incarnation)))
        : undefined;
    const auxBack = restartedAux?.posts.find((time) => time >= at);
    const stop = (restartedPeer ?? restartedAux)?.incarnation.stop;
    const stoppedEarly = stop !== undefined && stop !== null && stop.at - at < INTERRUPTED_WITHIN_MS;
    const back = shared !== undefined && (record.kind !== "aux-restart" || auxBack !== undefined);
    return [
      {
        kind: record.kind,
        target: record.target,
        at,
        highestBefore,
        resumedFrom,
        stepsLost:
          resumedFrom === null ? null : highestBefore === null ? 0 : Math.max(0, highestBefore - resumedFrom),
        secondsToSharedStep: shared === undefined ? null : (shared.time - at) / 1000,
        auxBackSeconds: auxBack === undefined ? null : (auxBack - at) / 1000,
        checkpointBefore: latestCheckpointBefore(checkpoints, at),
        outcome: back ? "resumed" : stoppedEarly ? "interrupted" : "never",
      },
    ];
  });
}

/** A step taken together with another trainer: shared, and the group had more than this peer's samples. */
export function isSharedStep(line: StepLine): boolean {
  return line.shared && line.samples > line.localSamples;
}

/** The step of the latest checkpoint created before `at`, in the newest generation that had one by then. */
export function latestCheckpointBefore(checkpoints: readonly CheckpointView[], at: number): number | null {
  const before = checkpoints.filter((checkpoint) => Date.parse(checkpoint.createdAt) < at);
  const generation = maxOf(before.map((checkpoint) => checkpoint.generation));
  return maxOf(before.filter((checkpoint) => checkpoint.generation === generation).map((c) => c.step));
}

function maxOf(values: readonly number[]): number | null {
  return values.length === 0 ? null : Math.max(...values);
}
