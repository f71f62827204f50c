import type { ExperimentConfig } from "@barnraise/protocol";
import type { Logger } from "pino";
import { countAveragingFailure, type SwarmMetrics } from "../metrics/swarm-metrics.ts";
import { compressorFor, resultCompressorFor } from "../compression/index.ts";
import type { AllReduceResult, AllReduceService } from "./butterfly-allreduce.ts";
import { optimalGroupSize } from "./group-size.ts";
import {
  optimalPartFractions,
  partElementCounts,
  predictedAllReduceSeconds,
  uniformPartFractions,
  type MemberCapacity,
} from "./load-balancing.ts";
import { isNoGroup, type FormedMember, type Matchmaking } from "./matchmaking.ts";
import { roundDeadlineMs, senderDeadlineMs } from "./deadlines.ts";
import { groupKey, planGrid, type GridPlan } from "./moshpit-grid.ts";
import { SwarmError, SwarmErrorCode } from "../errors.ts";
import { isDefaultLink } from "../net/link-meter.ts";
import type { AveragingMode, ElementRange } from "./partition.ts";
import type { ChunkContribution } from "./reducer-session.ts";
import type { Aggregator } from "./aggregation/aggregator.ts";
import { createAggregator } from "./aggregation/create-aggregator.ts";

export interface AveragerOptions {
  self: string;
  /** This peer's mode at the time of each round (a node found unreachable runs on as a client). */
  mode: () => AveragingMode;
  matchmaking: Matchmaking;
  allreduce: AllReduceService;
  averaging: ExperimentConfig["averaging"];
  compression: ExperimentConfig["compression"];
  /**
   * This peer's link: its capacity in bytes per second (measured or configured), offered to each
   * group for load balancing, and told of each round's traffic.
   */
  link: {
    current(): { uploadBytesPerSecond: number; downloadBytesPerSecond: number };
    observed(sample: { bytesSent: number; bytesReceived: number; seconds: number }): void;
  };
  /** How many trainers can take part in this peer's rounds (progress tracking), this peer included. */
  swarmSize: () => number;
  /**
   * Whether this peer, hearing of no other trainer, may step alone now (default: always). A peer
   * that has just started may not have heard yet of trainers starting with it; alone, each would
   * step a model of its own.
   */
  aloneAllowed?: () => boolean;
  /**
   * The trainers of the round for `epoch` as this peer sees them (progress tracking), itself
   * included when it trains: the Moshpit grid places them in PeerId order (`planGrid`).
   */
  roundMembers: (epoch: number) => readonly string[];
  /** This peer's run generation (rollbacks so far): groups form among peers of the same one. */
  generation?: () => number;
  /**
   * The most weight `peer` can have earned for `epoch` by its progress records, once that reaches
   * `declared` or a short wait for its records ran out (`ProgressTracker.awaitEarnedWeight`): this
   * peer's reducer refuses a sender declaring more in the samples round (round 0; later Moshpit
   * rounds weigh groups, not samples). Absent: no check.
   */
  earnedWeight?: (peer: string, epoch: number, declared: number, signal: AbortSignal) => Promise<number>;
  /** Per-peer, per-round failure probability used to choose the group size (DeDLOC App. C). */
  failureRate?: number;
  /** A monotonic clock in milliseconds, to time rounds; default `performance.now`. */
  now?: () => number;
  logger: Logger;
  /** Where each step's time, bytes and failures are counted. */
  metrics?: SwarmMetrics;
}

/**
 * No member's samples count for more than this many times the lower median of its group's in an
 * average (`ReducerSessionOptions.maxWeightRatio`): room for a GPU volunteer 16 times faster than
 * the median CPU one, none for a member that steers the mean by the weight it declares.
 */
export const MAX_WEIGHT_RATIO = 16;

export interface AverageOutcome {
  vector: Float32Array;
  /** Members of the last round's group. */
  groupSize: number;
  /** Sum of the weights that made it into the result. */
  totalWeight: number;
  rounds: number;
  /** No other trainer was in the swarm, so the vector is this peer's own (and the swarm's). */
  soleTrainer?: boolean;
  /** Bytes this peer wrote and read on the wire over all rounds (compressed, with frame headers). */
  bytesSent?: number;
  bytesReceived?: number;
  /** Peers left out of a round of this step, with the reason (see `AllReduceResult.exclusions`). */
  exclusions?: AllReduceResult["exclusions"];
}

/** Options of one averaging step. */
export interface AverageStepOptions {
  /**
   * Error feedback (see `AllReduceRunOptions.residual`): as long as the vector; on success it holds,
   * element by element, what the swarm did not receive of the vector (all zeros for a sole
   * trainer). Its contents are unspecified when the step fails, and the caller ignores them.
   */
  residual?: Float32Array;
}

/**
 * What one remote sender put into one chunk of the part this peer reduced in the first Moshpit round
 * of `epoch` (see `Averager.observeContributions`).
 */
export interface ObservedContribution {
  readonly epoch: number;
  /** The round's group: a retried round of the same epoch has another. */
  readonly groupId: string;
  readonly peerId: string;
  /** The sender's weight (its samples). */
  readonly weight: number;
  /** The part this peer reduced (absolute element offsets); each sender's chunks of it come in order. */
  readonly part: ElementRange;
  /** The offset of `values[0]` in the whole vector. */
  readonly start: number;
  /** The sender's decoded values, as aggregated; shared with other listeners: do not modify them. */
  readonly values: Float32Array;
}

export type ContributionListener = (contribution: ObservedContribution) => void;

/** How many recent rounds' measured-to-modelled ratios the round deadline looks at. */
const ROUND_HISTORY = 8;

/** Fixed plans kept for epochs before the newest one averaged. */
const PLANS_KEPT = 4;

/**
 * One averaging step for the optimizer: Moshpit All-Reduce (thesis Alg. 1) over groups formed by
 * matchmaking, each round a load-balanced butterfly all-reduce. For swarms no larger than the
 * best group size this is a single all-reduce of everyone (what DeDLOC ran); larger swarms average
 * over ceil(log_m n) rounds in grid groups of m, so a failure only costs its own group.
 */
export class Averager {
  readonly #options: AveragerOptions;
  /** How this peer reduces its parts, from the config once: every member of a group uses the same. */
  readonly #aggregator: Aggregator;
  #bytesAggregated = 0;
  /** Measured ÷ modelled time of the last successful rounds on measured links, newest last. */
  readonly #roundRatios: number[] = [];
  #lastWholeSwarmGroup: { generation: number; epoch: number; members: readonly string[] } | undefined;
  readonly #contributionListeners = new Set<ContributionListener>();
  /** The grid this peer fixed for each recent epoch when it started averaging it. */
  readonly #plans = new Map<number, GridPlan>();

  constructor(options: AveragerOptions) {
    this.#options = options;
    this.#aggregator = createAggregator(options.averaging);
  }

  /**
   * The members of the latest whole-swarm group (one Moshpit dimension) whose round this peer
   * finished, with the round's run generation and epoch: the peers that finished that round along
   * with it (those excluded from it left out), so that they are about to start the next epoch too.
   */
  get lastWholeSwarmGroup():
    { readonly generation: number; readonly epoch: number; readonly members: readonly string[] } | undefined {
    return this.#lastWholeSwarmGroup;
  }

  /**
   * The Moshpit grid of the round for `epoch` as this peer sees its trainers: groups of the size
   * DeDLOC Appendix C prescribes for their number (`optimalGroupSize`), in `planGrid`'s places.
   * Every member derives its groups from it, and a leader whom to wait for.
   *
   * A peer fixes the plan when it starts averaging the epoch, and keeps it for the epoch's rounds:
   * a round can take long on a loaded machine, and records that lapse or arrive meanwhile must not
   * move members between cells (the cell's leader would stop waiting for one it no longer places
   * there). Before that, the plan is computed from the records as they are.
   */
  plan(epoch: number): GridPlan {
    return this.#plans.get(epoch) ?? this.#planFromRecords(epoch);
  }

  #fixPlan(epoch: number): GridPlan {
    const plan = this.#planFromRecords(epoch);
    this.#plans.set(epoch, plan);
    for (const kept of this.#plans.keys())
      if (kept < epoch - PLANS_KEPT || kept > epoch) this.#plans.delete(kept);
    return plan;
  }

  #planFromRecords(epoch: number): GridPlan {
    const { self, averaging } = this.#options;
    const trainers = [...this.#options.roundMembers(epoch)];
    if (this.#options.mode() !== "aux") trainers.push(self);
    const n = new Set(trainers).size;
    const m = optimalGroupSize(Math.max(n, 2), this.#options.failureRate ?? 0.01, averaging.maxGroupSize);
    return planGrid(trainers, m);
  }

  /**
   * A client (a browser tab, a node behind NAT) reaches the other trainers through relays and may
   * miss the leader they gathered at; the group it got then holds no other trainer (an aux peer
   * alone brings no gradients) while they step without it. Applying that step would leave this
   * peer a model of its own; it fails the round instead, and loads the swarm's state once the
   * others have stepped. A full node in that place steps apart and takes the majority's state over
   * afterwards (`CollaborativeOptimizer`), since the others may be the ones that cannot reach it.
   */
  #refuseGroupApart(epoch: number, members: readonly FormedMember[]): void {
    const { self } = this.#options;
    if (members.some((member) => member.peerId !== self && member.mode !== "aux")) return;
    const others = this.#options.roundMembers(epoch).filter((peer) => peer !== self);
    if (others.length === 0) return;
    throw new SwarmError(
      SwarmErrorCode.NO_GROUP,
      `the group for step ${epoch} has no other trainer while ${others.length} train at it; ` +
        "not stepping apart from them (their state is loaded once they step)",
    );
  }

  /**
   * Calls `listener` with every remote sender's values for each chunk of the part this peer reduces
   * in the first round of each step, just before they are aggregated (a validator samples what each
   * peer contributes). Only the first round's senders send their own vectors; later Moshpit rounds
   * average group means, so they are not reported. An aux peer reduces (with weight 0) only in
   * steps of a single group, so it sees every contribution to its part then, and none in a grid.
   * The listener runs inside the reduction: it must be quick, and what it throws is logged and
   * ignored. Returns the function that removes it. Without listeners nothing is reported.
   */
  observeContributions(listener: ContributionListener): () => void {
    this.#contributionListeners.add(listener);
    return () => {
      this.#contributionListeners.delete(listener);
    };
  }

  /** Raw bytes this peer reduced for others so far (the leaderboard's "bytes aggregated"). */
  get bytesAggregated(): number {
    return this.#bytesAggregated;
  }

  /**
   * Averages `vector` (weighted by `weight`, its samples) with the swarm for `epoch`. With
   * `options.residual`, the first Moshpit round keeps error feedback on this peer's contribution;
   * later rounds average group means, not this peer's own vector, and send them in the first
   * round's result codec (`resultCompressorFor`: "sparse" after "topk"), so what the first round
   * delivered is not compressed away again.
   */
  average(
    epoch: number,
    vector: Float32Array,
    weight: number,
    signal?: AbortSignal,
    options: AverageStepOptions = {},
  ): Promise<AverageOutcome> {
    if (this.#options.swarmSize() <= 1 && this.#options.mode() !== "aux") {
      if (this.#options.aloneAllowed?.() === false) {
        return Promise.reject(
          new SwarmError(
            SwarmErrorCode.NO_GROUP,
            "no other trainer heard of yet: waiting a moment before stepping alone",
          ),
        );
      }
      // Alone in the swarm: the average of one is its own vector, so a lone volunteer still trains.
      return Promise.resolve(averageOfOne(vector, weight, options.residual));
    }
    // A retry uses the same keys: matchmaking gives a peer that asks again a new group.
    const metrics = this.#options.metrics;
    if (metrics === undefined) return this.#average(epoch, vector, weight, signal, options.residual);
    const started = performance.now();
    return this.#average(epoch, vector, weight, signal, options.residual).then(
      (outcome) => {
        metrics.allreduceSeconds.observe((performance.now() - started) / 1000);
        metrics.allreduceBytes.inc({ direction: "sent" }, outcome.bytesSent ?? 0);
        metrics.allreduceBytes.inc({ direction: "received" }, outcome.bytesReceived ?? 0);
        return outcome;
      },
      (error: unknown) => {
        countAveragingFailure(metrics, error);
        throw error;
      },
    );
  }

  async #average(
    epoch: number,
    vector: Float32Array,
    weight: number,
    signal: AbortSignal | undefined,
    residual: Float32Array | undefined,
  ): Promise<AverageOutcome> {
    const { averaging, compression, link, earnedWeight } = this.#options;
    const mode = this.#options.mode();
    const now = this.#options.now ?? (() => performance.now());
    const self = this.#options.self;
    const plan = this.#fixPlan(epoch);
    const { dimensions } = plan;
    if (dimensions > 1 && mode === "aux") {
      // An aux peer brings no samples and has no place in the grid; it helps whole-swarm rounds.
      throw new SwarmError(
        SwarmErrorCode.NO_GROUP,
        `an aux peer helps only rounds of one group, not a ${dimensions}-round grid`,
      );
    }
    const firstCompression = {
      method: compression.method,
      adaptiveThreshold: compression.adaptiveThreshold,
      topkDensity: compression.topkDensity,
    };
    const firstCodec = compressorFor(
      compression.method,
      vector.length,
      compression.adaptiveThreshold,
      compression.topkDensity,
    );
    const resultCodec = resultCompressorFor(firstCodec);
    const laterCompression =
      resultCodec === firstCodec ? firstCompression : { ...firstCompression, method: resultCodec.name };
    let current = vector;
    let currentWeight = weight;
    let groupSize = 1;
    let bytesSent = 0;
    let bytesReceived = 0;
    const exclusions: AllReduceResult["exclusions"] = [];
    for (let round = 0; round < dimensions; round += 1) {
      const key = groupKey(epoch, round, plan.cellOf(self, round) ?? [], this.#options.generation?.() ?? 0);
      const { uploadBytesPerSecond, downloadBytesPerSecond } = link.current();
      // A peer left over from the grid's core brings its samples once, in round 0.
      const roundWeight = plan.contributesIn(self, round) || mode === "aux" ? currentWeight : 0;
      let group;
      try {
        group = await this.#options.matchmaking.form(
          key,
          { mode, weight: roundWeight, uploadBytesPerSecond, downloadBytesPerSecond },
          signal,
        );
      } catch (error) {
        // Nobody else came, and the trainers this peer expected are gone meanwhile (paused by their
        // volunteers' rules, or left): it is alone now, and a lone volunteer still trains.
        if (round === 0 && isNoGroup(error) && mode !== "aux" && this.#options.swarmSize() <= 1) {
          if (this.#options.aloneAllowed?.() !== false) return averageOfOne(vector, weight, residual);
        }
        throw error;
      }
      if (round === 0 && dimensions === 1 && mode === "client") this.#refuseGroupApart(epoch, group.members);
      // Clients (behind NAT) reduce no part, so that all-reduce traffic never crosses a relay;
      // only a group of clients alone reduces among itself, through their relays.
      const onlyClients = group.members.every((member) => member.mode === "client");
      const capacities: MemberCapacity[] = group.members.map((member) => ({
        peerId: member.peerId,
        uploadBytesPerSecond: member.uploadBytesPerSecond,
        downloadBytesPerSecond: member.downloadBytesPerSecond,
        canReduce: member.mode !== "client" || onlyClients,
        sends: member.mode !== "aux",
      }));
      const fractions = averaging.loadBalancing
        ? await optimalPartFractions(capacities)
        : uniformPartFractions(capacities);
      const predictedSeconds = predictedAllReduceSeconds(capacities, fractions, current.byteLength);
      const timeoutMs = roundDeadlineMs({
        predictedSeconds,
        recentRatios: this.#roundRatios,
        floorMs: averaging.allreduceTimeoutMs,
      });
      const started = now();
      const result = await this.#options.allreduce.run({
        group: { groupId: group.groupId, members: group.members, fractions },
        partCounts: partElementCounts(current.length, fractions),
        vector: current,
        weight: roundWeight,
        compression: round === 0 ? firstCompression : laterCompression,
        ...(round === 0 && residual !== undefined ? { residual } : {}),
        aggregator: this.#aggregator,
        ...(round === 0 && this.#contributionListeners.size > 0
          ? { onContribution: this.#reportContribution(epoch, group.groupId) }
          : {}),
        // Samples are weighed in the first round only: each is checked against what its sender's
        // records earned, and none counts for more than MAX_WEIGHT_RATIO times the group's median.
        ...(round === 0 ? { maxWeightRatio: MAX_WEIGHT_RATIO } : {}),
        ...(round === 0 && earnedWeight !== undefined
          ? {
              earnedWeight: (peer: string, declared: number, signal: AbortSignal) =>
                earnedWeight(peer, epoch, declared, signal),
            }
          : {}),
        chunkSizeBytes: averaging.chunkSizeBytes,
        chunksInFlight: averaging.chunksInFlight,
        maxChunksInFlight: averaging.maxChunksInFlight,
        uploadBytesPerSecond,
        timeoutMs,
        senderTimeoutMs: senderDeadlineMs({
          chunkBytes: averaging.chunkSizeBytes,
          streams: fractions.filter((fraction) => fraction > 0).length - 1,
          slowestUploadBytesPerSecond: Math.min(
            ...capacities.filter((member) => member.sends).map((member) => member.uploadBytesPerSecond),
          ),
          roundTimeoutMs: timeoutMs,
        }),
        ...(signal === undefined ? {} : { signal }),
      });
      const seconds = (now() - started) / 1000;
      link.observed({ bytesSent: result.bytesSent, bytesReceived: result.bytesReceived, seconds });
      bytesSent += result.bytesSent;
      bytesReceived += result.bytesReceived;
      // A ratio scales the model of later rounds, so it must come from a model of the links: one
      // made on a member's default capacity (nothing measured yet) is off by whatever that link
      // really is (~200 in the netns lab's first rounds), and multiplied into the next, measured
      // prediction it gave deadlines of 25 minutes for an 80 KB vector. Offers carry only rates,
      // so the default is told by its value; a link configured to exactly that only costs the
      // history (the deadline falls back to four times the model, at least the config's).
      const modelled = !capacities.some(isDefaultLink);
      if (modelled && predictedSeconds > 0 && result.excluded.length === 0) {
        this.#roundRatios.push(seconds / predictedSeconds);
        if (this.#roundRatios.length > ROUND_HISTORY) this.#roundRatios.shift();
      }
      this.#bytesAggregated += result.bytesAggregated;
      current = result.vector;
      currentWeight = result.totalWeight;
      groupSize = group.members.length;
      if (dimensions === 1) {
        const excluded = new Set<string>(result.excluded);
        this.#lastWholeSwarmGroup = {
          generation: this.#options.generation?.() ?? 0,
          epoch,
          members: group.members.map((member) => member.peerId).filter((peer) => !excluded.has(peer)),
        };
      }
      if (result.excluded.length > 0) {
        this.#options.logger.info(
          { epoch, round, excluded: result.excluded },
          "members left the all-reduce; weights renormalized",
        );
      }
      exclusions.push(...result.exclusions);
      for (const { peer, reason } of result.exclusions) {
        if (reason === "elsewhere") continue;
        this.#options.metrics?.peerExclusions.inc({ reason });
        // Churn (timeouts, broken streams) is expected; values no honest peer sends are not.
        if (reason === "non-finite" || reason === "malformed") {
          this.#options.logger.warn(
            { epoch, round, peer, reason },
            `excluded ${peer} from the all-reduce: ${reason === "non-finite" ? "it sent non-finite values" : "it sent a malformed stream"}`,
          );
        }
      }
    }
    return {
      vector: current,
      groupSize,
      totalWeight: currentWeight,
      rounds: dimensions,
      bytesSent,
      bytesReceived,
      exclusions,
    };
  }

  /** The all-reduce's `onContribution` for the first round of `epoch`: tells every listener. */
  #reportContribution(epoch: number, groupId: string): (contribution: ChunkContribution) => void {
    return ({ peerId, weight, part, range, values }) => {
      const observed: ObservedContribution = {
        epoch,
        groupId,
        peerId,
        weight,
        part,
        start: range.start,
        values,
      };
      for (const listener of this.#contributionListeners) {
        try {
          listener(observed);
        } catch (error) {
          this.#options.logger.warn({ epoch, peer: peerId, err: error }, "a contribution listener failed");
        }
      }
    };
  }
}

/** The average of one: this peer's own vector, as a peer alone in the swarm steps (no error feedback kept). */
function averageOfOne(
  vector: Float32Array,
  weight: number,
  residual: Float32Array | undefined,
): AverageOutcome {
  residual?.fill(0);
  return {
    vector: vector.slice(),
    groupSize: 1,
    totalWeight: weight,
    rounds: 0,
    soleTrainer: true,
    bytesSent: 0,
    bytesReceived: 0,
  };
}
