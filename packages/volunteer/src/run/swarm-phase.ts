import {
  CollaborativeOptimizer,
  loadLatestCheckpoint,
  openNodeSession,
  type JoinedNode,
  type NodeSession,
} from "@barnraise/swarm";
import type { TrainableModel } from "@barnraise/models";
import { hashName } from "@barnraise/models";
import { LossReportingProgress } from "../training/loss-reporting-progress.ts";
import type { VolunteerOptions } from "./volunteer-options.ts";

/** A peer that hears of no other trainer steps alone only once it has been in the swarm this long. */
const ALONE_AFTER_MS = 10_000;

/** The peer in the swarm, with the optimizer whose state it serves. */
export interface SwarmMember {
  readonly session: NodeSession;
  readonly progress: LossReportingProgress;
  readonly optimizer: CollaborativeOptimizer;
}

/**
 * Opens the node's session in the swarm and the collaborative optimizer on it: the swarm serves the
 * optimizer's state to new peers (or, with no live donor ahead, the run's latest checkpoint from
 * the platform), and the optimizer averages through the swarm's ports. The peer says hello at once.
 * The session is open when this returns; the caller closes it.
 */
export async function joinSwarm(
  node: JoinedNode,
  model: TrainableModel,
  options: VolunteerOptions,
): Promise<SwarmMember> {
  const { reporter } = options;
  const { joined } = node;
  const served: { optimizer?: CollaborativeOptimizer } = {};
  const session = await openNodeSession(node, {
    mode: options.mode,
    listen: options.listen,
    peers: options.peers,
    logger: reporter.logger,
    ...(options.runtime.metrics === undefined ? {} : { metrics: options.runtime.metrics }),
    ...(options.runtime.transports === undefined ? {} : { transports: options.runtime.transports }),
    swarm: (platform) => ({
      // Peers starting together hear of each other before any of them steps alone.
      aloneAfterMs: ALONE_AFTER_MS,
      ...(options.caps === undefined ? {} : { caps: options.caps }),
      getState: () => served.optimizer?.exportState() ?? null,
      // No live donor ahead of us: the run's latest checkpoint, vouched for by the platform.
      loadCheckpoint: async (minEpoch, generation, signal) => {
        const latest = await loadLatestCheckpoint(platform, signal);
        if (latest === null || latest.attestation.generation !== generation) return null;
        if (latest.state.epoch < minEpoch) return null;
        reporter.log("info", `loading the run's checkpoint of step ${latest.state.epoch} from the platform`, {
          step: latest.state.epoch,
          sha256: latest.attestation.sha256,
        });
        return latest.state;
      },
    }),
    onRefreshed: (refreshed) => {
      if (refreshed.configVersion !== joined.configVersion) {
        reporter.log("warn", "the organizer changed the experiment's config; restart the peer to use it", {
          configVersion: refreshed.configVersion,
        });
      }
    },
  });
  const { swarm } = session;
  if (options.mode === "node") {
    reporter.log("info", "listening", { peerId: swarm.peerId, addresses: swarm.node.multiaddrs() });
  }
  const progress = new LossReportingProgress(swarm.progress);
  const optimizer = new CollaborativeOptimizer({
    config: joined.config,
    layout: model.layout,
    // Every peer starts from the same bits: the seed is the experiment's.
    parameters: model.initialParameters(hashName(joined.experiment.id)),
    progress,
    averager: options.wrapAverager?.(swarm.averagerPort()) ?? swarm.averagerPort(),
    state: swarm.statePort(),
    // Checkpoints record which config the state was trained with.
    configVersion: joined.configVersion,
  });
  served.optimizer = optimizer;
  // Say hello to the swarm at once: a peer that waits to hear from others before training would
  // otherwise wait out the whole discovery time when everyone has just started.
  progress.report({ epoch: optimizer.epoch, samplesAccumulated: 0, samplesPerSecond: 0 });
  return { session, progress, optimizer };
}
