/**
 * A worker thread hosting some of a test's swarms (see swarm-threads.ts): one event loop carries
 * only its share of the nodes, so a test of many real libp2p nodes in one process does not stall
 * on a single thread. It answers the host's requests one message at a time.
 */
import { parseExperimentConfig } from "@barnraise/protocol";
import { parentPort, workerData } from "node:worker_threads";
import type { Swarm } from "../../src/swarm.ts";
import { TestAuthority } from "./swarm-fixtures.ts";
import { startSwarm } from "./swarm-harness.ts";
import type { TrainingState } from "../../src/state/training-state.ts";
import { gossipCounters, zeroCounts, type GossipCounts } from "./gossip-counters.ts";
import { seededFloats } from "./seeded-random.ts";
import {
  checksum,
  type CatchUpReply,
  type WorkerData,
  type WorkerReply,
  type WorkerRequest,
  type WorkerResult,
} from "./swarm-threads.ts";

const data = workerData as WorkerData;
const authority = new TestAuthority(data.experimentId, {
  publicKey: new Uint8Array(data.authorityPublicKey),
  secretKey: new Uint8Array(data.authoritySecretKey),
});
parseExperimentConfig(data.config); // fail early, in the worker, on a bad config
const swarms: Swarm[] = [];
/** Each swarm's gossip traffic, by its index in `swarms`. */
const gossip: GossipCounts[] = [];
/** The state each swarm serves, by its index in `swarms`. */
const held = new Map<number, TrainingState>();

async function handle(request: WorkerRequest): Promise<WorkerResult> {
  switch (request.op) {
    case "start": {
      const base = swarms.length;
      const started = await Promise.all(
        Array.from({ length: request.count }, (_, k) => {
          const meter = gossipCounters();
          gossip[base + k] = meter.counts;
          return startSwarm(authority, {
            config: data.config,
            bootstrap: request.bootstrap,
            getState: () => held.get(base + k) ?? null,
            pubsubMetrics: meter.register,
          });
        }),
      );
      swarms.push(...started);
      return started.map((swarm) => ({ peerId: swarm.node.peerId, multiaddrs: swarm.node.multiaddrs() }));
    }
    case "members":
      return swarms.map((swarm) => swarm.node.members().length);
    case "report":
      swarms.forEach((swarm, k) => {
        swarm.progress.report({
          epoch: request.epoch,
          samplesAccumulated: request.weights[k] ?? 0,
          samplesPerSecond: 10,
        });
      });
      await Promise.all(swarms.map((swarm) => swarm.progress.pushNow()));
      return null;
    case "records":
      return swarms.map(
        (swarm) => swarm.progress.records().filter((entry) => entry.record.epoch === request.epoch).length,
      );
    case "plan": {
      const plan = swarms[0]?.averager.plan(request.epoch);
      return plan === undefined ? null : { radices: [...plan.radices] };
    }
    case "average": {
      const outcomes = await Promise.allSettled(
        swarms.map((swarm, k) =>
          swarm.averager.average(
            request.epoch,
            request.vectors[k] ?? new Float32Array(),
            request.weights[k] ?? 0,
          ),
        ),
      );
      return outcomes.map((outcome) =>
        outcome.status === "fulfilled"
          ? {
              vector: outcome.value.vector,
              rounds: outcome.value.rounds,
              groupSize: outcome.value.groupSize,
              totalWeight: outcome.value.totalWeight,
            }
          : { error: outcome.reason instanceof Error ? outcome.reason.message : String(outcome.reason) },
      );
    }
    case "hold":
      request.states.forEach((state, k) => {
        const swarm = swarms[k];
        if (state === null || swarm === undefined) return;
        held.set(k, {
          epoch: state.epoch,
          parameters: seededFloats(state.seed, state.size),
          optimizer: {
            name: "adam",
            step: state.epoch,
            slots: { m: seededFloats(state.seed + 1, state.size) },
          },
        });
        swarm.progress.report({ epoch: state.epoch, samplesAccumulated: 0, samplesPerSecond: 10 });
      });
      await Promise.all(swarms.map((swarm) => swarm.progress.pushNow()));
      return null;
    case "donors":
      return swarms.map((swarm) => swarm.stateDonors(request.epoch, 0).length);
    case "catch-up":
      return Promise.all(
        swarms.map(async (swarm, k): Promise<CatchUpReply> => {
          if (request.take[k] !== true) return null;
          const started = performance.now();
          try {
            const state = await swarm.statePort().loadNewer(0, 0);
            if (state === null) return { error: "no newer state" };
            return {
              epoch: state.epoch,
              checksum: checksum(state.parameters),
              ms: performance.now() - started,
            };
          } catch (error) {
            return { error: error instanceof Error ? error.message : String(error) };
          }
        }),
      );
    case "progress":
      for (const swarm of swarms) {
        swarm.progress.report({
          epoch: request.epoch,
          samplesAccumulated: request.samples,
          samplesPerSecond: 2,
        });
      }
      return null;
    case "gossip":
      return swarms.map((swarm, k) => ({
        swarmSize: swarm.progress.swarmSize(),
        periodMs: swarm.progress.periodMs(),
        counts: { ...(gossip[k] ?? zeroCounts()) },
      }));
    case "served":
      return swarms.map((swarm) => swarm.state.servedChunks);
    case "control":
      swarms[request.index]?.control.offer(request.token, "platform");
      return null;
    case "refuses":
      return swarms.map((swarm) =>
        swarm.node.peerId !== request.peerId &&
        (swarm.control.current()?.version ?? 0) >= request.version &&
        swarm.node.authorizer.isDenied(request.peerId) &&
        swarm.node.libp2p
          .getConnections()
          .every((connection) => connection.remotePeer.toString() !== request.peerId)
          ? 1
          : 0,
      );
    case "stop":
      await Promise.all(swarms.splice(0).map((swarm) => swarm.stop().catch(() => undefined)));
      return null;
  }
}

parentPort?.on("message", (request: WorkerRequest) => {
  handle(request).then(
    (result) => parentPort?.postMessage({ id: request.id, result } satisfies WorkerReply),
    (error: unknown) =>
      parentPort?.postMessage({
        id: request.id,
        error: error instanceof Error ? (error.stack ?? error.message) : String(error),
      } satisfies WorkerReply),
  );
});
