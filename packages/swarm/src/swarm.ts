import type { ExperimentConfig } from "@barnraise/protocol";
import { AllReduceService } from "./averaging/butterfly-allreduce.ts";
import { Averager } from "./averaging/averager.ts";
import { Matchmaking } from "./averaging/matchmaking.ts";
import type { AveragerPort, EpochState, ProgressPort, StatePort } from "./optim/ports.ts";
import { SwarmNode, type SwarmNodeOptions } from "./p2p/swarm-node.ts";
import { ProgressTracker } from "./progress/progress-tracker.ts";
import { StateSharing } from "./state/state-sharing.ts";
import type { TrainingState } from "./state/training-state.ts";

/** A conservative default link capacity (≈100 Mbit/s) until measurements say otherwise. */
const DEFAULT_BYTES_PER_SECOND = 12_500_000;

export interface SwarmOptions extends SwarmNodeOptions {
  config: ExperimentConfig;
  /** The state this peer serves to new or stale peers; null while it has none. */
  getState: () => TrainingState | null;
  /** This peer's link capacity for load balancing, bytes per second. */
  bandwidth?: { uploadBytesPerSecond: number; downloadBytesPerSecond: number };
  /** Progress push period; default 1 s. */
  progressIntervalMs?: number;
}

/**
 * The whole engine for one experiment, layered like hivemind (p2p → progress → averaging →
 * state): a `SwarmNode`, progress tracking, matchmaking, the butterfly all-reduce service, the
 * Moshpit averager and state sharing, wired together. It hands the collaborative optimizer its
 * three ports (`progressPort`, `averagerPort`, `statePort`).
 */
export class Swarm {
  readonly node: SwarmNode;
  readonly progress: ProgressTracker;
  readonly matchmaking: Matchmaking;
  readonly allreduce: AllReduceService;
  readonly averager: Averager;
  readonly state: StateSharing;
  readonly config: ExperimentConfig;

  private constructor(node: SwarmNode, options: SwarmOptions) {
    const { config, logger } = options;
    this.node = node;
    this.config = config;
    this.progress = new ProgressTracker({
      rpc: node.rpc,
      peers: () => node.members(),
      targetBatchSize: config.training.targetBatchSize,
      mode: options.mode,
      logger,
      ...(options.progressIntervalMs === undefined ? {} : { intervalMs: options.progressIntervalMs }),
      ...(options.now === undefined ? {} : { now: options.now }),
    });
    this.matchmaking = new Matchmaking({
      rpc: node.rpc,
      logger,
      leaders: () => node.members().filter((peer) => node.modeOf(peer) !== "client"),
      expected: (key) => this.#expectedMembers(key),
      willJoin: (key) => this.#willJoin(key),
      maxGroupSize: config.averaging.maxGroupSize,
      timeoutMs: config.averaging.matchmakingTimeoutMs,
    });
    this.allreduce = new AllReduceService({ rpc: node.rpc, logger });
    this.averager = new Averager({
      self: node.peerId,
      mode: options.mode,
      matchmaking: this.matchmaking,
      allreduce: this.allreduce,
      averaging: config.averaging,
      compression: config.compression,
      bandwidth: options.bandwidth ?? {
        uploadBytesPerSecond: DEFAULT_BYTES_PER_SECOND,
        downloadBytesPerSecond: DEFAULT_BYTES_PER_SECOND,
      },
      swarmSize: () => this.#trainers(),
      logger,
    });
    this.state = new StateSharing({ rpc: node.rpc, getState: options.getState, logger });
  }

  static async create(options: SwarmOptions): Promise<Swarm> {
    return new Swarm(await SwarmNode.create(options), options);
  }

  get peerId(): string {
    return this.node.peerId;
  }

  async start(): Promise<void> {
    this.progress.start();
    this.matchmaking.start();
    this.allreduce.start();
    this.state.start();
    await this.node.start();
  }

  async stop(): Promise<void> {
    this.progress.stop();
    this.matchmaking.stop();
    this.allreduce.stop();
    this.state.stop();
    await this.node.stop();
  }

  progressPort(): ProgressPort {
    return {
      report: (progress) => {
        this.progress.report(progress);
      },
      global: () => this.progress.global(),
    };
  }

  averagerPort(): AveragerPort {
    return {
      average: (epoch, vector, weight, signal) => this.averager.average(epoch, vector, weight, signal),
    };
  }

  statePort(): StatePort {
    return {
      loadNewer: async (epoch, signal): Promise<EpochState | null> => {
        const donors = this.progress
          .records()
          // Trainers that accept connections: an aux trains nothing, and its state may be old.
          .filter((entry) => entry.record.epoch > epoch && entry.record.mode === "node")
          .map((entry) => entry.peerId);
        if (donors.length === 0) return null;
        return this.state.download({
          donors,
          minEpoch: epoch + 1,
          ...(signal === undefined ? {} : { signal }),
        });
      },
    };
  }

  /**
   * How many trainers the swarm has, this node included: aux peers average but bring no gradients,
   * so a volunteer whose only company is an aux peer trains alone rather than wait for a group.
   */
  #trainers(): number {
    const alive = this.progress.records().filter((entry) => entry.record.mode !== "aux").length;
    const connected = this.node.members().filter((peer) => this.node.modeOf(peer) !== "aux").length;
    return Math.max(alive, connected) + 1;
  }

  /**
   * Whether this node may still ask for the group of `key`: not before its first progress report,
   * not once its own progress has passed the key's epoch (the round is done, or it loaded newer
   * state) unless that epoch's delayed round is still in flight, and for an aux only for the
   * epoch it reported.
   */
  #willJoin(key: string): boolean {
    const epoch = keyEpoch(key);
    if (epoch === undefined) return true;
    // A node that has reported nothing yet is still loading state (or, as an aux, not helping).
    const local = this.progress.localRecord();
    if (local === null) return false;
    // An aux reports an epoch only when it is about to help average it; a delayed round in flight
    // is reported as `averagingEpoch`.
    if (local.mode === "aux") return local.epoch === epoch;
    return local.epoch <= epoch || local.averagingEpoch === epoch;
  }

  /**
   * Members the leader waits for: peers whose latest progress is at the key's epoch, or past it
   * with that epoch's delayed round in flight. An aux peer counts too, so it reports an epoch only
   * when it is about to help average that epoch.
   */
  #expectedMembers(key: string): string[] {
    // Only a whole-swarm group (one Moshpit dimension: key "e<epoch>/r0/") has a known member list;
    // grid cells close when full or at the deadline.
    if (!/^e\d+\/r0\/$/.test(key)) return [];
    const epoch = keyEpoch(key);
    const connected = new Set(this.node.members());
    return this.progress
      .records()
      .filter(
        ({ record, peerId }) =>
          (record.epoch === epoch || record.averagingEpoch === epoch) && connected.has(peerId),
      )
      .map((entry) => entry.peerId);
  }
}

/** The epoch of a group key ("e<epoch>/r<round>/<grid index>"), or undefined for another key. */
function keyEpoch(key: string): number | undefined {
  const match = /^e(\d+)\//.exec(key);
  return match === null ? undefined : Number(match[1]);
}
