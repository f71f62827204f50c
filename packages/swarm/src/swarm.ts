import type { ExperimentConfig } from "@barnraise/protocol";
import { AllReduceService } from "./averaging/butterfly-allreduce.ts";
import { Averager } from "./averaging/averager.ts";
import { NoShows } from "./averaging/no-shows.ts";
import { Matchmaking } from "./averaging/matchmaking.ts";
import { parseGroupKey } from "./averaging/moshpit-grid.ts";
import { RunControlBoard } from "./control/run-control-board.ts";
import { isSwarmError, SwarmErrorCode } from "./errors.ts";
import type { AveragerPort, EpochState, ProgressPort, StatePort } from "./optim/ports.ts";
import { LinkMeter, type LinkEstimate } from "./net/link-meter.ts";
import { DEFAULT_PROBE_BYTES, LinkProbe } from "./net/link-probe.ts";
import { SwarmNode, type SwarmNodeOptions } from "./p2p/swarm-node.ts";
import { silentMetrics, type SwarmMetrics } from "./metrics/swarm-metrics.ts";
import type { ProgressRecord } from "./progress/progress-messages.ts";
import { GossipProgressTransport, progressTopic } from "./progress/progress-gossip.ts";
import { ProgressTracker } from "./progress/progress-tracker.ts";
import { generationOf } from "./progress/swarm-estimate.ts";
import { StateSharing } from "./state/state-sharing.ts";
import type { TrainingState } from "./state/training-state.ts";

export interface SwarmOptions extends SwarmNodeOptions {
  config: ExperimentConfig;
  /** The state this peer serves to new or stale peers; null while it has none. */
  getState: () => TrainingState | null;
  /**
   * A fixed link capacity for load balancing, bytes per second, instead of measuring it (see
   * LinkMeter): for a lab whose links are known, or an operator who wants to set it.
   */
  bandwidth?: { uploadBytesPerSecond: number; downloadBytesPerSecond: number };
  /** Progress push period; default 1 s. */
  progressIntervalMs?: number;
  /** Where the node records what it measures (the Node programs: Prometheus); default: nowhere. */
  metrics?: SwarmMetrics;
  /** This process's session id (≤ 32 of [A-Za-z0-9_-]), put into every progress record. */
  session?: string;
  /**
   * The last resort of `statePort().loadNewer` when no peer can give newer state: the run's latest
   * checkpoint of `generation` at or after `minEpoch` (from the platform), or null when there is
   * none. Errors are logged and count as none.
   */
  loadCheckpoint?: (
    minEpoch: number,
    generation: number,
    signal?: AbortSignal,
  ) => Promise<TrainingState | null>;
  /** After `loadCheckpoint` found nothing newer, how long to not ask it again; default 30 s. */
  checkpointRetryMs?: number;
  /**
   * A trainer that hears of no other steps alone only once it has been in the swarm this long;
   * default 0. Peers that start together (a demo, a re-token, a reboot) must first hear of each
   * other, or each steps a model of its own before they meet.
   */
  aloneAfterMs?: number;
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
  /** The organizer's run control: the newest token seen, spread to every member. */
  readonly control: RunControlBoard;
  /** This peer's link capacity, measured (or configured), for load balancing. */
  readonly link: LinkMeter;
  /** Speed tests with other members; every node serves them. */
  readonly linkProbe: LinkProbe;
  readonly config: ExperimentConfig;
  /** What this node measures; the Node programs serve it with --metrics-port. */
  readonly metrics: SwarmMetrics;
  readonly #options: SwarmOptions;
  /** The last time `loadCheckpoint` had nothing newer: for which generation and epoch, and when. */
  #checkpointMiss: { generation: number; epoch: number; at: number } | undefined;
  /** When `start` was called (performance.now). */
  #startedAt: number | undefined;
  /** Members that did not come to gatherings this node led and waited for them at (see NoShows). */
  readonly #noShows: NoShows;

  private constructor(node: SwarmNode, options: SwarmOptions) {
    const { config, logger } = options;
    this.node = node;
    this.config = config;
    this.#options = options;
    this.#noShows = new NoShows(options.now === undefined ? {} : { now: options.now });
    this.metrics = options.metrics ?? silentMetrics();
    this.link = new LinkMeter({
      ...(options.bandwidth === undefined ? {} : { configured: options.bandwidth }),
      ...(options.caps === undefined
        ? {}
        : {
            cap: {
              ...(options.caps.upload === undefined
                ? {}
                : { uploadBytesPerSecond: options.caps.upload.bytesPerSecond }),
              ...(options.caps.download === undefined
                ? {}
                : { downloadBytesPerSecond: options.caps.download.bytesPerSecond }),
            },
          }),
    });
    this.linkProbe = new LinkProbe({ rpc: node.rpc });
    this.progress = new ProgressTracker({
      transport: new GossipProgressTransport({
        pubsub: node.libp2p.services.pubsub,
        topic: progressTopic(options.experimentId),
        self: node.peerId,
        passes: node.passes,
        currentPass: () => node.passHolder.token(),
        logger,
        ...(options.now === undefined ? {} : { now: options.now }),
      }),
      targetBatchSize: config.training.targetBatchSize,
      // A node that turns out not to be reachable runs on as a client: its records say so.
      mode: () => node.mode,
      logger,
      link: () => this.link.current(),
      ...(options.session === undefined ? {} : { session: options.session }),
      ...(options.progressIntervalMs === undefined ? {} : { intervalMs: options.progressIntervalMs }),
      ...(options.now === undefined ? {} : { now: options.now }),
    });
    this.matchmaking = new Matchmaking({
      rpc: node.rpc,
      logger,
      leaders: (key) => this.#leaders(key),
      expected: (key) => this.#expectedMembers(key),
      willJoin: (key) => this.#willJoin(key),
      onClosed: (_key, joined, missing) => {
        for (const peer of joined) this.#noShows.joined(peer);
        for (const peer of missing) this.#noShows.missed(peer);
      },
      maxGroupSize: config.averaging.maxGroupSize,
      timeoutMs: config.averaging.matchmakingTimeoutMs,
    });
    this.allreduce = new AllReduceService({ rpc: node.rpc, logger });
    this.averager = new Averager({
      self: node.peerId,
      mode: () => node.mode,
      matchmaking: this.matchmaking,
      allreduce: this.allreduce,
      averaging: config.averaging,
      compression: config.compression,
      link: this.link,
      swarmSize: () => this.#trainers(),
      aloneAllowed: () =>
        this.#startedAt !== undefined && performance.now() - this.#startedAt >= (options.aloneAfterMs ?? 0),
      roundMembers: (epoch) => this.#roundMembers(epoch),
      generation: () => this.progress.generation(),
      earnedWeight: (peer, epoch, declared, signal) =>
        this.progress.awaitEarnedWeight(peer, epoch, declared, signal),
      logger,
      metrics: this.metrics,
    });
    this.state = new StateSharing({
      rpc: node.rpc,
      getState: options.getState,
      logger,
      metrics: this.metrics,
    });
    this.control = new RunControlBoard({
      rpc: node.rpc,
      experimentId: options.experimentId,
      authority: options.authority,
      peers: () => node.members(),
      applyRevocations: (revoked) => {
        node.applyRevocations(revoked);
      },
      logger,
    });
    // A node that connects hears the run control held here at once, even when it cannot reach
    // the platform: a paused, banned or rolled-back run holds for newcomers too.
    node.onGreeted((peer) => {
      if (this.control.current() === null) return;
      this.control.push(peer).catch((error: unknown) => {
        logger.debug({ peer, err: error }, "pushing the run control to a member failed");
      });
    });
  }

  static async create(options: SwarmOptions): Promise<Swarm> {
    return new Swarm(await SwarmNode.create(options), options);
  }

  get peerId(): string {
    return this.node.peerId;
  }

  async start(): Promise<void> {
    this.#startedAt = performance.now();
    this.matchmaking.start();
    this.allreduce.start();
    this.state.start();
    this.control.start();
    this.linkProbe.start();
    await this.node.start();
    // Joins the progress topic, which needs a started node.
    this.progress.start();
  }

  async stop(): Promise<void> {
    this.progress.stop();
    this.matchmaking.stop();
    this.allreduce.stop();
    this.state.stop();
    this.control.stop();
    this.linkProbe.stop();
    await this.node.stop();
  }

  /**
   * Measures this peer's link with a speed test against `peer` (an aux peer: a server, usually
   * faster than a volunteer's link) and keeps the result. Rejects with the exchange's SwarmError.
   */
  async measureLink(peer: string, signal?: AbortSignal): Promise<LinkEstimate> {
    this.link.probed(await this.linkProbe.probe(peer, DEFAULT_PROBE_BYTES, signal));
    return this.link.current();
  }

  progressPort(): ProgressPort {
    return {
      report: (progress) => {
        this.progress.report(progress);
      },
      global: () => this.progress.global(),
      globalBefore: (agoMs) => this.progress.globalBefore(agoMs),
      at: (epoch) => this.progress.at(epoch),
      sharedStates: (epoch) => this.progress.sharedStates(epoch),
    };
  }

  averagerPort(): AveragerPort {
    return {
      average: (epoch, vector, weight, signal, options) =>
        this.averager.average(epoch, vector, weight, signal, options),
    };
  }

  /**
   * State for the optimizer: from donors ahead of it — trainers that accept connections whose
   * epoch is ahead, and aux peers whose served state (`stateEpoch`) is, all of the same run
   * generation — else, when there are none or every one fails, from `loadCheckpoint`. Null when
   * nothing newer can be had.
   */
  statePort(): StatePort {
    return {
      loadNewer: async (epoch, generation, signal): Promise<EpochState | null> => {
        const donors = this.#donors(epoch, generation);
        if (donors.length > 0) {
          try {
            return await this.state.download({
              donors,
              minEpoch: epoch + 1,
              generation,
              ...(signal === undefined ? {} : { signal }),
            });
          } catch (error) {
            if (!isSwarmError(error, SwarmErrorCode.STATE_UNAVAILABLE)) throw error;
            this.#options.logger.debug({ err: error }, "no donor could give newer state");
          }
        }
        return this.#loadCheckpoint(epoch, generation, signal);
      },
      loadShared: async (epoch, digest, generation, signal): Promise<EpochState | null> => {
        const donors = [...(this.progress.sharedStates(epoch).get(digest) ?? [])];
        if (donors.length === 0) return null;
        try {
          return await this.state.download({
            donors,
            minEpoch: epoch,
            generation,
            ...(signal === undefined ? {} : { signal }),
          });
        } catch (error) {
          if (!isSwarmError(error, SwarmErrorCode.STATE_UNAVAILABLE)) throw error;
          this.#options.logger.debug({ err: error }, "no holder of the swarm's state could give it");
          return null;
        }
      },
    };
  }

  /** Peers that should hold state newer than `epoch` of `generation`. */
  #donors(epoch: number, generation: number): string[] {
    return this.stateDonors(epoch + 1, generation, { aux: true });
  }

  /**
   * Peers that should hold state at or after `minEpoch` of `generation`: trainers that accept
   * connections first, then clients connected to this node (a client behind NAT serves state over
   * the connection it opened, or through its relay slot), and with `aux`, aux peers whose served
   * state is recent enough.
   */
  stateDonors(minEpoch: number, generation: number, options: { aux?: boolean } = {}): string[] {
    const connected = new Set(this.node.members());
    const rank = (record: ProgressRecord, peer: string): number | undefined => {
      if (record.mode === "node") return record.epoch >= minEpoch ? 0 : undefined;
      if (record.mode === "client") return record.epoch >= minEpoch && connected.has(peer) ? 1 : undefined;
      return options.aux === true && (record.stateEpoch ?? -1) >= minEpoch ? 2 : undefined;
    };
    return this.progress
      .records()
      .filter(({ record }) => generationOf(record) === generation)
      .map(({ record, peerId }) => ({ peerId, rank: rank(record, peerId) }))
      .filter((entry): entry is { peerId: string; rank: number } => entry.rank !== undefined)
      .sort((a, b) => a.rank - b.rank)
      .map((entry) => entry.peerId);
  }

  /** The run's checkpoint when it is newer than `epoch`; asked again only after `checkpointRetryMs`. */
  async #loadCheckpoint(epoch: number, generation: number, signal?: AbortSignal): Promise<EpochState | null> {
    const load = this.#options.loadCheckpoint;
    if (load === undefined) return null;
    const now = (this.#options.now ?? Date.now)();
    const miss = this.#checkpointMiss;
    const retryMs = this.#options.checkpointRetryMs ?? 30_000;
    if (miss?.generation === generation && epoch >= miss.epoch && now - miss.at < retryMs) return null;
    let state: TrainingState | null = null;
    try {
      state = await load(epoch + 1, generation, signal);
    } catch (error) {
      if (signal?.aborted === true) throw error;
      this.#options.logger.warn({ err: error }, "could not load the run's checkpoint");
    }
    if (state !== null && state.epoch > epoch && generationOf(state) === generation) {
      this.#checkpointMiss = undefined;
      return state;
    }
    this.#checkpointMiss = { generation, epoch, at: now };
    return null;
  }

  /**
   * How many trainers can take part in this node's rounds, this node included: those of its run
   * generation at most one epoch behind it (a peer further behind loads state rather than average),
   * those of another generation (one of the two is following a rollback the other has followed),
   * plus connected trainers that have not reported yet. Aux peers average but bring no gradients,
   * and paused trainers (their volunteers' rules hold them) bring none now, so a volunteer whose
   * only company is an aux peer, paused trainers or trainers far behind it, trains alone rather
   * than wait for a group.
   */
  #trainers(): number {
    const local = this.progress.localRecord();
    const generation = this.progress.generation();
    const floor = local === null ? 0 : (local.averagingEpoch ?? local.epoch) - 1;
    const records = this.progress.records();
    const reported = new Set(records.map((entry) => entry.peerId));
    let trainers = 1;
    for (const { record, peerId } of records) {
      // A paused trainer brings nothing until it trains again.
      if (record.mode === "aux" || record.paused !== undefined) continue;
      // A key that publishes records and has contributed nothing does not size the groups.
      if (!this.progress.hasContributed(peerId)) continue;
      // A trainer of another generation is following the same rollback (or this node is): it is
      // about to average with this node, which must not step alone meanwhile.
      if (generationOf(record) !== generation || record.epoch >= floor) trainers += 1;
    }
    for (const peer of this.node.members()) {
      if (!reported.has(peer) && this.node.modeOf(peer) !== "aux") trainers += 1;
    }
    return trainers;
  }

  /**
   * Whether this node may still ask for the group of `key`: not before its first progress report,
   * not while it is paused, not once its own progress has passed the key's epoch (the round is
   * done, or it loaded newer state) unless that epoch's delayed round is still in flight, for an aux
   * only for the round its record names as the one it is about to help (`averagingEpoch`), and in a
   * Moshpit grid only for the cell its plan puts it in.
   */
  #willJoin(key: string): boolean {
    const parsed = parseGroupKey(key);
    if (parsed === undefined) return true;
    const { epoch } = parsed;
    // A node that has reported nothing yet is still loading state (or, as an aux, not helping).
    const local = this.progress.localRecord();
    if (local === null) return false;
    // A round of another run generation (a rollback that this node has not followed yet, or one it
    // has left behind) is not this node's.
    if (parsed.generation !== generationOf(local)) return false;
    // An aux names the round it is about to help as `averagingEpoch`; a trainer's delayed round in
    // flight is reported the same way.
    if (local.mode === "aux") return local.averagingEpoch === epoch;
    // Paused by its volunteer's rules (its round in flight, if any, has finished): not this one.
    if (local.paused !== undefined) return false;
    if (local.epoch > epoch && local.averagingEpoch !== epoch) return false;
    // In a grid, only the cell this node's plan puts it in.
    return parsed.wholeSwarm || this.#cellMembers(parsed).includes(this.node.peerId);
  }

  /**
   * Who may lead the group of `key`: connected members that accept connections (aux peers, and
   * trainers that have contributed samples and are not paused); for a Moshpit grid
   * cell, those of them the plan puts in the cell (each cell its own leader), or, when the cell
   * has none, any of them.
   */
  #leaders(key: string): string[] {
    // A trainer that has contributed nothing (a key that only publishes records), or is paused,
    // leads nothing.
    const paused = new Set(
      this.progress
        .records()
        .filter(({ record }) => record.paused !== undefined)
        .map(({ peerId }) => peerId),
    );
    const leaders = this.node
      .members()
      .filter(
        (peer) =>
          this.node.modeOf(peer) === "aux" ||
          (this.node.modeOf(peer) === "node" && this.progress.hasContributed(peer) && !paused.has(peer)),
      );
    const parsed = parseGroupKey(key);
    if (parsed === undefined || parsed.wholeSwarm) return leaders;
    const cell = new Set(this.#cellMembers(parsed));
    const inCell = leaders.filter((peer) => cell.has(peer));
    return inCell.length > 0 || (cell.has(this.node.peerId) && this.node.mode !== "client")
      ? inCell
      : leaders;
  }

  /** The members the grid of the key's epoch puts in the key's cell and round. */
  #cellMembers(parsed: { epoch: number; round: number; cell: readonly number[] }): string[] {
    return this.averager.plan(parsed.epoch).membersOf(parsed.round, parsed.cell);
  }

  /**
   * The trainers of this node's run generation in the round for `epoch`, by their progress records
   * (paused ones left out):
   * at that epoch, averaging it, or just past it (they finished its round). This node is added by
   * the averager when it trains. Every member that sees the same records places them alike.
   */
  #roundMembers(epoch: number): string[] {
    const generation = this.progress.generation();
    return this.progress
      .records()
      .filter(
        ({ record, peerId }) =>
          record.mode !== "aux" &&
          record.paused === undefined &&
          generationOf(record) === generation &&
          (record.epoch === epoch || record.epoch === epoch + 1 || record.averagingEpoch === epoch) &&
          this.progress.hasContributed(peerId),
      )
      .map((entry) => entry.peerId);
  }

  /**
   * Members the leader waits for, of the key's run generation: trainers whose latest progress is
   * at the key's epoch, or past it with that epoch's delayed round in flight, or still one epoch
   * before it after finishing that round in this peer's group; and aux peers whose record names the
   * key's epoch as the round they are about to help (`averagingEpoch`).
   */
  #expectedMembers(key: string): string[] {
    const parsed = parseGroupKey(key);
    if (parsed === undefined) return [];
    if (!parsed.wholeSwarm) {
      // A grid cell: the members the plan puts there, of those connected (this node joins itself).
      const connected = new Set(this.node.members());
      return this.#cellMembers(parsed).filter((peer) => connected.has(peer));
    }
    const { epoch, generation } = parsed;
    const connected = new Set(this.node.members());
    // Those who finished the previous round with this peer start this epoch at the same moment; a
    // record they push on the way may arrive after a fast peer has already reached the target and
    // opened this gathering, which must not close without them.
    const last = this.averager.lastWholeSwarmGroup;
    const finishedWithUs = new Set(
      last?.generation === generation && last.epoch === epoch - 1 ? last.members : [],
    );
    // A trainer that has contributed nothing yet (a key that only publishes records), or did not
    // come to a recent gathering it was expected at, is not waited for; it may still join. Nor is
    // a paused one.
    const expected = (record: ProgressRecord, peerId: string) =>
      record.mode === "aux"
        ? record.averagingEpoch === epoch
        : record.paused === undefined &&
          ((record.epoch === epoch - 1 && finishedWithUs.has(peerId)) ||
            ((record.epoch === epoch || record.averagingEpoch === epoch) &&
              this.progress.hasContributed(peerId) &&
              !this.#noShows.excused(peerId)));
    return this.progress
      .records()
      .filter(
        ({ record, peerId }) =>
          connected.has(peerId) && generationOf(record) === generation && expected(record, peerId),
      )
      .map((entry) => entry.peerId);
  }
}
