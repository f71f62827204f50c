import type { CheckResult } from "../types.ts";

/**
 * The platform recorded the swarm's last step: once the peers have stopped and the aux has had its
 * time to post, the newest timeline's highest recorded step is at least the highest step the peers'
 * last runs logged. A gap means the aux stopped posting (it left the swarm, or the platform refused).
 */
export function checkRecorded(lastLoggedStep: number | null, lastRecordedStep: number | null): CheckResult {
  if (lastLoggedStep === null) {
    return { name: "last step recorded", pass: true, summary: "the peers logged no step", details: [] };
  }
  const pass = lastRecordedStep !== null && lastRecordedStep >= lastLoggedStep;
  return {
    name: "last step recorded",
    pass,
    summary: `the peers' last step ${lastLoggedStep}, the platform's last recorded step ${lastRecordedStep ?? "—"}`,
    details: pass
      ? []
      : [`the platform has no record of steps ${(lastRecordedStep ?? 0) + 1} to ${lastLoggedStep}`],
  };
}
