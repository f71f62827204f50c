import { abortableSleep } from "@barnraise/swarm";

/**
 * A finished run's last step must reach a checkpoint before the trainers leave: once every peer
 * has gone, nobody holds that state, and the aux (which checkpoints it, see its Checkpointer's
 * `finalStep`) can download it only from a peer. So a peer that reached `training.maxSteps` stays
 * in the swarm, serving its state, until the platform lists a checkpoint of that step or the wait
 * runs out. With no aux in the swarm nobody would take that checkpoint: the peer does not wait.
 */

/**
 * How long a peer waits for the last step's checkpoint, unless told otherwise: time for the aux to
 * finish a checkpoint in flight and then download and upload the last one.
 */
export const FINAL_CHECKPOINT_WAIT_MS = 120_000;
/** How often it asks the platform meanwhile. */
export const FINAL_CHECKPOINT_POLL_MS = 5_000;

export interface FinalCheckpointWaitOptions {
  /** The run's last step, which this peer reached and holds the state of. */
  readonly step: number;
  /** The step of the run's latest checkpoint on the platform; null when it has none. */
  readonly latestStep: (signal: AbortSignal) => Promise<number | null>;
  /** Whether an aux (which takes the checkpoints) is in the swarm now. */
  readonly auxPresent: () => boolean;
  readonly log: (level: "info" | "warn", message: string, fields: Readonly<Record<string, unknown>>) => void;
  /** Ctrl-C or a refusal: stop waiting at once. */
  readonly signal: AbortSignal;
  readonly timeoutMs?: number;
  readonly pollMs?: number;
}

/**
 * - "checkpointed": the platform has a checkpoint of `step` (or later);
 * - "no-aux": no aux is in the swarm to take it (none ever was, or it left while the peer waited);
 * - "timed-out": none came in time (the peer leaves anyway, and says so);
 * - "stopped": the signal aborted the wait.
 */
export type FinalCheckpointOutcome = "checkpointed" | "no-aux" | "timed-out" | "stopped";

/** Waits, serving state meanwhile (the caller keeps its swarm node up), as described above. */
export async function waitForFinalCheckpoint(
  options: FinalCheckpointWaitOptions,
): Promise<FinalCheckpointOutcome> {
  const { step, signal } = options;
  const timeoutMs = options.timeoutMs ?? FINAL_CHECKPOINT_WAIT_MS;
  const pollMs = options.pollMs ?? FINAL_CHECKPOINT_POLL_MS;
  const deadline = Date.now() + timeoutMs;
  let latest: number | null | undefined;
  let told = false;
  for (;;) {
    if (signal.aborted) return "stopped";
    try {
      latest = await options.latestStep(signal);
    } catch {
      // The platform did not answer this time (or the peer was stopped: the sleep below ends it);
      // ask again until the deadline.
    }
    if (latest !== undefined && latest !== null && latest >= step) {
      if (told) options.log("info", `the run's last step ${step} is checkpointed`, { step });
      return "checkpointed";
    }
    if (!options.auxPresent()) {
      if (told) {
        options.log("warn", `the aux left before it checkpointed the run's last step ${step}; leaving`, {
          step,
          latestCheckpointStep: latest ?? null,
        });
      }
      return "no-aux";
    }
    if (Date.now() + pollMs > deadline) break;
    if (!told) {
      told = true;
      options.log(
        "info",
        `waiting up to ${Math.round(timeoutMs / 1000)} s for the aux to checkpoint the run's last step ${step}, whose state this peer holds`,
        { step, latestCheckpointStep: latest ?? null },
      );
    }
    try {
      await abortableSleep(pollMs, signal);
    } catch {
      return "stopped";
    }
  }
  options.log(
    "warn",
    `no checkpoint of the run's last step ${step} within ${Math.round(timeoutMs / 1000)} s; leaving ` +
      `(the latest checkpoint is ${latest === undefined ? "unknown" : latest === null ? "none" : `step ${latest}`})`,
    { step, latestCheckpointStep: latest ?? null },
  );
  return "timed-out";
}
