import { generateKeyPair } from "@barnraise/protocol";
import { afterEach, describe, expect, it } from "vitest";
import type { ExperimentConfigInput } from "@barnraise/protocol";
import type { SwarmNode } from "../../src/p2p/swarm-node.ts";
import { GossipProgressTransport, progressTopic } from "../../src/progress/progress-gossip.ts";
import { ProgressTracker } from "../../src/progress/progress-tracker.ts";
import type { Swarm } from "../../src/swarm.ts";
import { at } from "../support/at.ts";
import { eventually, startNode, TestAuthority } from "../support/swarm-fixtures.ts";
import { startSwarm, testConfig } from "../support/swarm-harness.ts";

/**
 * One volunteer token, many machines, no training: extra keys join with the same token and gossip
 * valid progress records at the swarm's epoch, with no samples, and never come to a round. The
 * honest trainers must not plan them into their rounds: with a gathering deadline of two minutes,
 * a leader that waited for them would not finish one round in this test's time. In their first
 * seconds (NEWCOMER_GRACE_MS) the phantoms still count as newcomers, so the first round may take
 * that long; every round after it forms at once.
 */

const PHANTOMS = 12;
const ROUNDS = 4;
const SAMPLES = 64;

const swarms: Swarm[] = [];
const nodes: SwarmNode[] = [];
const trackers: ProgressTracker[] = [];
afterEach(async () => {
  for (const tracker of trackers.splice(0)) tracker.stop();
  await Promise.all([
    ...swarms.splice(0).map((swarm) => swarm.stop().catch(() => undefined)),
    ...nodes.splice(0).map((node) => node.stop().catch(() => undefined)),
  ]);
});

describe("phantom members: keys that publish progress and never train (real swarm)", () => {
  it("are not waited for: the honest trainers average round after round", async () => {
    const authority = new TestAuthority();
    const config: ExperimentConfigInput = {
      ...testConfig,
      averaging: { ...testConfig.averaging, matchmakingTimeoutMs: 120_000, allreduceTimeoutMs: 10_000 },
    };
    const first = await startSwarm(authority, { config, username: "vera" });
    swarms.push(first);
    const bootstrap = first.node.multiaddrs();
    swarms.push(await startSwarm(authority, { config, bootstrap, username: "walt" }));
    const phantoms: ProgressTracker[] = [];
    for (let i = 0; i < PHANTOMS; i++) {
      // The same volunteer's pass on every phantom key.
      const node = await startNode(authority, {
        identity: generateKeyPair(),
        username: "mallory",
        bootstrap,
      });
      nodes.push(node);
      const tracker = new ProgressTracker({
        transport: new GossipProgressTransport({
          pubsub: node.libp2p.services.pubsub,
          topic: progressTopic(authority.experimentId),
          self: node.peerId,
          passes: node.passes,
          currentPass: () => node.passHolder.token(),
        }),
        targetBatchSize: 64,
        intervalMs: 500,
      });
      tracker.start();
      trackers.push(tracker);
      phantoms.push(tracker);
    }
    await eventually(
      () => swarms.every((swarm) => swarm.node.members().length >= 1 + PHANTOMS),
      "the honest trainers are connected to each other and to every phantom",
      60_000,
    );

    for (let epoch = 0; epoch < ROUNDS; epoch++) {
      for (const phantom of phantoms) phantom.report({ epoch, samplesAccumulated: 0, samplesPerSecond: 0 });
      for (const swarm of swarms) {
        swarm.progress.report({ epoch, samplesAccumulated: SAMPLES, samplesPerSecond: SAMPLES });
      }
      await Promise.all([...phantoms, ...swarms.map((swarm) => swarm.progress)].map((t) => t.pushNow()));
      await eventually(
        () =>
          swarms.every(
            (swarm) =>
              swarm.progress.records().filter((entry) => entry.record.epoch === epoch).length ===
              1 + PHANTOMS,
          ),
        `the honest trainers hear every record of epoch ${epoch}`,
        30_000,
      );
      const outcomes = await Promise.all(
        swarms.map((swarm, k) => swarm.averager.average(epoch, new Float32Array(256).fill(k + 1), SAMPLES)),
      );
      for (const outcome of outcomes) {
        expect(outcome.groupSize).toBe(2);
        expect(outcome.totalWeight).toBe(2 * SAMPLES);
        expect(at(outcome.vector, 0)).toBeCloseTo(1.5, 6);
      }
    }
  }, 90_000);
});
