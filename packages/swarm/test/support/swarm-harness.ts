import {
  generateKeyPair,
  parseExperimentConfig,
  type ExperimentConfigInput,
  type PeerRole,
} from "@barnraise/protocol";
import { Swarm, type SwarmOptions } from "../../src/swarm.ts";
import type { TrainingState } from "../../src/state/training-state.ts";
import { at } from "./at.ts";
import { eventually, silentLogger, type TestAuthority } from "./swarm-fixtures.ts";

export { seededRandom } from "./seeded-random.ts";

export interface TestSwarmOptions {
  mode?: SwarmOptions["mode"];
  username?: string;
  role?: PeerRole;
  bootstrap?: string[];
  config?: ExperimentConfigInput;
  getState?: () => TrainingState | null;
  bandwidth?: SwarmOptions["bandwidth"];
  session?: string;
  loadCheckpoint?: SwarmOptions["loadCheckpoint"];
  checkpointRetryMs?: number;
  /** Listen addresses; default TCP on 127.0.0.1 (none for a client). */
  listen?: string[];
  /** Whether the node holds a relay slot on the aux even when reachable (default: see SwarmNodeOptions). */
  listenViaRelays?: boolean;
  logger?: SwarmOptions["logger"];
  /** Where gossipsub counts its traffic (see gossip-counters.ts). */
  pubsubMetrics?: SwarmOptions["pubsubMetrics"];
}

/** Test defaults: short timeouts so failure paths finish quickly, small chunks to exercise streaming. */
export const testConfig: ExperimentConfigInput = {
  training: { targetBatchSize: 64 },
  averaging: {
    matchmakingTimeoutMs: 4_000,
    allreduceTimeoutMs: 8_000,
    chunkSizeBytes: 4096,
    maxGroupSize: 16,
  },
  compression: { method: "none" },
};

/** A started `Swarm` on 127.0.0.1 with a pass from `authority`. */
export async function startSwarm(authority: TestAuthority, options: TestSwarmOptions = {}): Promise<Swarm> {
  const identity = generateKeyPair();
  const mode = options.mode ?? "node";
  const passInit = {
    username: options.username ?? `user-${identity.publicKey[0]}`,
    role: options.role ?? (mode === "aux" ? "aux" : "trainer"),
  } as const;
  const swarm = await Swarm.create({
    experimentId: authority.experimentId,
    identity,
    authority: authority.keys(),
    pass: authority.pass(identity, passInit),
    refreshPass: () => Promise.resolve(authority.pass(identity, passInit)),
    mode,
    listen: options.listen ?? (mode === "client" ? [] : ["/ip4/127.0.0.1/tcp/0"]),
    ...(options.listenViaRelays === undefined ? {} : { listenViaRelays: options.listenViaRelays }),
    bootstrap: options.bootstrap ?? [],
    logger: options.logger ?? silentLogger,
    helloTimeoutMs: 10_000,
    config: parseExperimentConfig(options.config ?? testConfig),
    getState: options.getState ?? (() => null),
    progressIntervalMs: 1_000,
    ...(options.bandwidth === undefined ? {} : { bandwidth: options.bandwidth }),
    ...(options.session === undefined ? {} : { session: options.session }),
    ...(options.loadCheckpoint === undefined ? {} : { loadCheckpoint: options.loadCheckpoint }),
    ...(options.checkpointRetryMs === undefined ? {} : { checkpointRetryMs: options.checkpointRetryMs }),
    ...(options.pubsubMetrics === undefined ? {} : { pubsubMetrics: options.pubsubMetrics }),
  });
  await swarm.start();
  return swarm;
}

export function randomVector(length: number, random: () => number): Float32Array {
  const vector = new Float32Array(length);
  for (let i = 0; i < length; i += 1) vector[i] = random() * 2 - 1;
  return vector;
}

/** The float64 weighted mean of the vectors. */
export function weightedMean(vectors: readonly Float32Array[], weights: readonly number[]): Float64Array {
  const mean = new Float64Array(at(vectors, 0).length);
  const total = weights.reduce((sum, weight) => sum + weight, 0);
  vectors.forEach((vector, k) => {
    const weight = at(weights, k);
    for (let i = 0; i < mean.length; i += 1) mean[i] = at(mean, i) + (at(vector, i) * weight) / total;
  });
  return mean;
}

export function maxAbsDifference(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let max = 0;
  for (let i = 0; i < a.length; i += 1) max = Math.max(max, Math.abs(at(a, i) - at(b, i)));
  return max;
}

/**
 * Every swarm reports `epoch` with its weight, then waits (up to `timeoutMs`) until it sees every
 * other one there.
 */
export async function reportAndSync(
  members: readonly Swarm[],
  epoch: number,
  weights: readonly number[],
  timeoutMs = 10_000,
): Promise<void> {
  members.forEach((swarm, k) => {
    // An aux is counted in only while its record names the round it is about to help; it trains
    // nothing, so it claims no samples (its peers refuse a record of an aux pass that does).
    const aux = swarm.node.mode === "aux";
    swarm.progress.report({
      epoch,
      samplesAccumulated: aux ? 0 : at(weights, k),
      samplesPerSecond: aux ? 0 : 10,
      ...(aux ? { averagingEpoch: epoch } : {}),
    });
  });
  await Promise.all(members.map((swarm) => swarm.progress.pushNow()));
  await eventually(
    () =>
      members.every(
        (swarm) =>
          swarm.progress.records().filter((entry) => entry.record.epoch === epoch).length >=
          members.length - 1,
      ),
    `every member sees the others at epoch ${epoch}`,
    timeoutMs,
  );
}
