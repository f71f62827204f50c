/**
 * The soak's checks: pure functions of what it observed (types.ts), each a CheckResult with its
 * numbers and every problem found. test/checks.test.ts runs each one passing and failing.
 */
export { checkCredit, CREDIT_TOLERANCE, KILL_RISK_MS } from "./checks/credit.ts";
export { checkOneModel, type OneModelInput } from "./checks/one-model.ts";
export { checkPlatformLog, EXPLAINS_MS } from "./checks/platform-log.ts";
export { checkProcesses } from "./checks/processes.ts";
export { checkRecorded } from "./checks/recorded.ts";
export { checkRecovery } from "./checks/recovery.ts";
export { checkStepSamples, STEP_SAMPLES_TOLERANCE } from "./checks/step-samples.ts";
export {
  checkpointOrderProblems,
  checkpointSnapshotProblems,
  checkStepsForward,
  indexMetrics,
  metricSnapshotProblems,
  peerStepBacks,
  timelineProblems,
  type StepsForwardInput,
} from "./checks/steps-forward.ts";
