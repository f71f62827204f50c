import type { CollaborativeOptimizerEvent } from "@barnraise/swarm";
import type { Reporter } from "./peer-status.ts";

/** After this many averaging failures in a row, the peer says plainly that it is not contributing. */
const FAILED_ROUNDS_TO_WARN = 3;

/**
 * Logs the collaborative optimizer's events. Failed rounds in a row are counted, and so are steps
 * taken with no other trainer while others train: at FAILED_ROUNDS_TO_WARN, and at every multiple of
 * it, the peer says plainly that its gradients are not reaching the swarm, with the reason and what
 * to check.
 */
export function logOptimizerEvents(
  reporter: Pick<Reporter, "log" | "event">,
): (event: CollaborativeOptimizerEvent) => void {
  let failedInARow = 0;
  let aloneInARow = 0;
  return (event) => {
    if (event.type === "step") {
      reporter.event?.({
        type: "step",
        step: {
          step: event.epoch,
          groupSize: event.groupSize,
          shared: event.shared,
          localSamples: event.localSamples,
          bytesSent: event.bytesSent,
          stateDigest: event.stateDigest,
        },
      });
      failedInARow = 0;
      aloneInARow = event.shared ? 0 : aloneInARow + 1;
      if (aloneInARow > 0 && aloneInARow % FAILED_ROUNDS_TO_WARN === 0) {
        reporter.log(
          "warn",
          `the last ${aloneInARow} steps averaged with no other trainer while others train: this peer is training a model of its own, and its samples do not count for the run. ` +
            "Check that this machine can reach the other peers ('could not reach member' lines); it keeps trying",
          { aloneInARow, groupSize: event.groupSize },
        );
      }
    }
    if (event.type === "round-failed") {
      failedInARow += 1;
      if (failedInARow % FAILED_ROUNDS_TO_WARN === 0) {
        const reason = event.error instanceof Error ? event.error.message : String(event.error);
        reporter.log(
          "warn",
          `averaging failed ${failedInARow} times in a row (last: ${reason}): this peer's gradients are not reaching the swarm. ` +
            "Check that this machine can reach the other peers (a firewall or NAT in the way shows as 'could not reach member' lines); it keeps trying",
          { failedInARow, reason },
        );
      }
    }
    logOptimizerEvent(reporter, event);
  };
}

function logOptimizerEvent(reporter: Pick<Reporter, "log">, event: CollaborativeOptimizerEvent): void {
  switch (event.type) {
    case "step":
      reporter.log("info", `step ${event.epoch}`, {
        step: event.epoch,
        groupSize: event.groupSize,
        samples: event.totalWeight,
        localSamples: event.localSamples,
        shared: event.shared,
        learningRate: event.learningRate,
        gradientNorm: Number(event.gradientNorm.toPrecision(4)),
        ...(event.bytesSent === undefined ? {} : { bytesSent: event.bytesSent }),
        stateDigest: event.stateDigest,
      });
      return;
    case "round-failed":
      reporter.log(
        "warn",
        `averaging for step ${event.epoch + 1} failed; keeping the gradients for the next try`,
        {
          err: event.error,
        },
      );
      return;
    case "state-loaded":
      reporter.log("info", `loaded the swarm's state at step ${event.epoch}`, {
        step: event.epoch,
        previousStep: event.previousEpoch,
      });
      return;
    case "state-load-failed":
      reporter.log("warn", "loading the swarm's state failed; trying again", { err: event.error });
      return;
    case "no-donor":
      reporter.log(
        "warn",
        `the swarm reports step ${event.swarmEpoch} but nobody can hand over that state; training on at step ${event.epoch}`,
        { step: event.epoch, swarmStep: event.swarmEpoch, retryInSeconds: event.retryInMs / 1000 },
      );
      return;
  }
}
