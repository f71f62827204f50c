import type { RunControl } from "@barnraise/protocol";
import {
  JoinError,
  JoinErrorCode,
  loadRollbackCheckpoint,
  type CollaborativeOptimizer,
  type PlatformClient,
  type Swarm,
  unrefTimer,
} from "@barnraise/swarm";
import type { Trainer } from "../training/trainer.ts";
import type { Reporter } from "../status/peer-status.ts";

interface RunControlFollowerOptions {
  readonly swarm: Swarm;
  readonly platform: PlatformClient;
  readonly optimizer: CollaborativeOptimizer;
  readonly trainer: Trainer;
  readonly reporter: Reporter;
  readonly username: string;
  readonly leave: (error: JoinError) => void;
}

/**
 * Obeys the newest run control the swarm's board holds: pause and resume the trainer, leave when
 * this node's user is revoked, and on a rollback load the named checkpoint (checked against the
 * control's SHA-256) and continue from its step.
 */
export function followRunControl(options: RunControlFollowerOptions): {
  stop: () => void;
  signal: AbortSignal;
} {
  const { swarm, platform, optimizer, trainer, reporter } = options;
  const stopped = new AbortController();
  let rollingBack: number | undefined;
  const apply = (control: RunControl) => {
    if (control.revokedUsernames.includes(options.username)) {
      options.leave(
        new JoinError(
          JoinErrorCode.BANNED,
          "the organizer banned this node's user or removed it from the allowlist",
        ),
      );
      return;
    }
    if (control.status === "paused" && !trainer.paused) {
      reporter.log("warn", "the organizer paused the run; waiting");
      trainer.pause();
    } else if (control.status === "running" && trainer.paused) {
      reporter.log("info", "the organizer resumed the run");
      trainer.resume();
    }
    const target = control.rollback;
    if (target === null || control.generation <= optimizer.generation || rollingBack === control.generation)
      return;
    rollingBack = control.generation;
    loadRollbackCheckpoint(platform, target, control.generation, stopped.signal).then(
      (state) => {
        if (control.generation <= optimizer.generation) return;
        optimizer.importState({ ...state, generation: control.generation });
        reporter.log("warn", `the organizer rolled the run back to step ${target.step}`, {
          step: target.step,
          generation: control.generation,
        });
      },
      (error: unknown) => {
        rollingBack = undefined;
        if (!stopped.signal.aborted) {
          reporter.log("warn", "could not load the rollback checkpoint; trying again", { err: error });
        }
      },
    );
  };
  const unsubscribe = swarm.control.on("change", apply);
  const again = () => {
    const current = swarm.control.current();
    if (current !== null) apply(current);
  };
  again();
  // Also looked at now and then: a rollback whose checkpoint failed to load is tried again.
  const timer = setInterval(again, 5_000);
  unrefTimer(timer);
  return {
    signal: stopped.signal,
    stop: () => {
      clearInterval(timer);
      stopped.abort();
      unsubscribe();
    },
  };
}
