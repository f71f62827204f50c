import type { RunControl } from "@barnraise/protocol";
import {
  loadRollbackCheckpoint,
  type PlatformClient,
  type Swarm,
  type TrainingState,
} from "@barnraise/swarm";
import type { Logger } from "pino";
import type { BackgroundTasks } from "../background-tasks.ts";

export interface RollbackFollowerOptions {
  readonly swarm: Swarm;
  readonly platform: PlatformClient;
  readonly logger: Logger;
  /** The run generation the aux follows now. */
  readonly generation: () => number;
  readonly signal: AbortSignal;
  readonly background: BackgroundTasks;
  /** Told with the rollback checkpoint's state (checked against the control's SHA-256). */
  readonly onRolledBack: (state: TrainingState, step: number, generation: number) => void;
}

/**
 * Follows the organizer's rollbacks in the run control the swarm's board keeps (it spreads it to
 * every node): loads the checkpoint a new generation names, one at a time. Returns the unsubscribe.
 */
export function followRollbacks(options: RollbackFollowerOptions): () => void {
  const { swarm, logger, generation, signal, background } = options;
  let rollingBack = false;
  return swarm.control.on("change", (control: RunControl) => {
    if (control.generation === generation() || control.rollback === null || rollingBack) return;
    rollingBack = true;
    const target = control.rollback;
    background.run(
      loadRollbackCheckpoint(options.platform, target, control.generation, signal)
        .then((state) => {
          options.onRolledBack(state, target.step, control.generation);
          logger.warn(
            { step: target.step, generation: control.generation },
            `the organizer rolled the run back to step ${target.step}`,
          );
        })
        .finally(() => {
          rollingBack = false;
        }),
    );
  });
}
