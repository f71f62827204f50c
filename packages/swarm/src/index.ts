// A node's identity and where it keeps it
export * from "./identity.ts";
// Errors
export * from "./errors.ts";
// The whole engine
export * from "./swarm.ts";
export * from "./metrics/swarm-metrics.ts";
// p2p: libp2p node, pass gate, signed RPC
export {
  SwarmNode,
  type Connectivity,
  type SwarmNodeOptions,
  type SwarmTransports,
  type RevocationList,
} from "./p2p/swarm-node.ts";
export { PeerAuthorizer } from "./p2p/peer-authorizer.ts";
export { PassHolder } from "./p2p/pass-holder.ts";
export { RefusalLog, type Refusal } from "./p2p/refusal-log.ts";
export type { AveragingMode } from "./p2p/hello.ts";
export * from "./rpc/rpc.ts";
export { Libp2pRpc, protocolId } from "./rpc/libp2p-rpc.ts";
// Progress tracking
export {
  ProgressTracker,
  type PeerProgressRecord,
  type GlobalProgress,
  type EpochProgress,
  type LocalProgress,
  type ProgressTrackerOptions,
  type ImplausibleRecord,
} from "./progress/progress-tracker.ts";
export {
  MAX_SESSION_LENGTH,
  sessionSchema,
  type ProgressMode,
  type ProgressRecord,
} from "./progress/progress-messages.ts";
export {
  estimateSwarm,
  generationOf,
  type SwarmEstimate,
  type SwarmEstimateInput,
  type SwarmEstimatePeer,
} from "./progress/swarm-estimate.ts";
// Run control
export {
  RunControlBoard,
  type RunControlBoardOptions,
  type RunControlListener,
  type RunControlOffer,
  type RunControlSource,
} from "./control/run-control-board.ts";
export { controlMethod, CONTROL_FRAME_BYTES, type ControlResult } from "./control/control-messages.ts";
// Averaging
export {
  Averager,
  type AverageOutcome,
  type ContributionListener,
  type ObservedContribution,
} from "./averaging/averager.ts";
export {
  AllReduceService,
  type AllReduceResult,
  type AllReduceRunOptions,
} from "./averaging/butterfly-allreduce.ts";
export { Matchmaking, type FormedGroup, type MemberOffer } from "./averaging/matchmaking.ts";
export * from "./averaging/load-balancing.ts";
export * from "./averaging/group-size.ts";
export * from "./averaging/moshpit-grid.ts";
export type { AllReduceGroup, ElementRange, GroupMember } from "./averaging/partition.ts";
// Compression
export * from "./compression/index.ts";
// The link: measured capacity and speed tests
export * from "./net/link-meter.ts";
export * from "./rpc/traffic-caps.ts";
export { LinkProbe, DEFAULT_PROBE_BYTES, type LinkProbeResult } from "./net/link-probe.ts";
// State sharing
export { StateSharing, type StateDownloadOptions } from "./state/state-sharing.ts";
export * from "./state/training-state.ts";
export { serializeTrainingState, deserializeTrainingState } from "./state/state-snapshot.ts";
export { stateDigest, STATE_DIGEST_PATTERN } from "./state/state-digest.ts";
// Collaborative optimizer
export * from "./optim/ports.ts";
export * from "./optim/parameter-layout.ts";
export * from "./optim/create-flat-optimizer.ts";
export * from "./optim/flat-optimizer.ts";
export { GradientAccumulator } from "./optim/gradient-accumulator.ts";
export { warmupLearningRate } from "./optim/learning-rate.ts";
export * from "./optim/collaborative-optimizer.ts";
export { contributionStepScale } from "./optim/create-training-strategy.ts";
export { DEDLOC_STEP_SHARE } from "./optim/dedloc-strategy.ts";
export type { ContributionStepScale } from "./optim/training-strategy.ts";

// Joining an experiment on the platform
export * from "./platform/join-client.ts";
export * from "./platform/join-error.ts";
export type { JoinedExperiment } from "./platform/join-response.ts";
export * from "./platform/join-retry.ts";
export { unrefTimer } from "./time/unref-timer.ts";
export * from "./platform/join-experiment.ts";
export { readBoundedBytes, readBoundedText } from "./platform/bounded-body.ts";
export * from "./platform/pass-refresher.ts";
export type { AuthorityPin, AuthorityPinStore } from "./platform/authority-pin.ts";
export * from "./platform/authority-keys.ts";
export * from "./platform/platform-client.ts";
export * from "./platform/run-state-client.ts";
export * from "./platform/control-poller.ts";
export * from "./session/node-session.ts";
