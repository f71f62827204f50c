import { afterEach, describe, expect, it } from "vitest";
import type { ExperimentConfigInput } from "@barnraise/protocol";
import type { Swarm } from "../../src/swarm.ts";
import { at } from "../support/at.ts";
import { lossAndGradient, regressionDataset, type RegressionDataset } from "../support/linear-regression.ts";
import { eventually, TestAuthority } from "../support/swarm-fixtures.ts";
import { startSwarm, testConfig } from "../support/swarm-harness.ts";

/**
 * A member with a valid trainer pass joins every round declaring a weight of 10^15 samples (within
 * the schema's bounds) and streams its gradient scaled by 1,000, while its progress records
 * announce what an honest peer's do. Three honest peers of a real swarm train a linear regression
 * with plain SGD on the averaged gradient, with the weighted mean (no robust aggregation to hide
 * behind). Each honest reducer holds the declared weight against what the member's records earned
 * and refuses it: the honest peers train as they do when it behaves.
 */

const HONEST = 3;
const DIMENSION = 32;
const SAMPLES = 512;
const EPOCHS = 6;
const LEARNING_RATE = 0.5;
const CLAIMED_WEIGHT = 1e15;
const TRUE_WEIGHTS = Float64Array.from({ length: DIMENSION }, (_, i) => Math.cos(i + 1));

type Dataset = RegressionDataset;

/** Each peer's own samples, from its own seeded stream. */
function dataset(peer: number): Dataset {
  return regressionDataset(7_000 + peer, SAMPLES, TRUE_WEIGHTS);
}

const swarms: Swarm[] = [];
afterEach(async () => {
  await Promise.all(swarms.splice(0).map((swarm) => swarm.stop().catch(() => undefined)));
});

interface Training {
  initialLoss: number;
  finalLoss: number;
  /** The largest total weight an honest peer's step reported. */
  largestTotalWeight: number;
  exclusions: { peer: string; reason: string }[];
  attackerPeerId: string;
  agree: boolean;
}

/** Three honest nodes and a fourth member (a client: it reduces no part) train for EPOCHS steps. */
async function train(attack: boolean): Promise<Training> {
  const authority = new TestAuthority();
  const config: ExperimentConfigInput = {
    ...testConfig,
    averaging: {
      ...testConfig.averaging,
      matchmakingTimeoutMs: 5_000,
      allreduceTimeoutMs: 10_000,
      chunkSizeBytes: 1024,
      loadBalancing: false,
      aggregation: "mean",
    },
  };
  const first = await startSwarm(authority, { config });
  swarms.push(first);
  const bootstrap = first.node.multiaddrs();
  for (let k = 1; k < HONEST; k++) swarms.push(await startSwarm(authority, { config, bootstrap }));
  const attacker = await startSwarm(authority, { config, bootstrap, mode: "client", username: "mallory" });
  swarms.push(attacker);
  await eventually(
    () => swarms.slice(0, HONEST).every((swarm) => swarm.node.members().length === HONEST),
    "meshed",
    30_000,
  );
  const data = swarms.map((_, k) => dataset(k));
  const parameters = swarms.map(() => new Float32Array(DIMENSION));
  const honestLoss = (weights: Float32Array) =>
    data.slice(0, HONEST).reduce((sum, peerData) => sum + lossAndGradient(weights, peerData).loss, 0) /
    HONEST;
  const initialLoss = honestLoss(at(parameters, 0));
  const exclusions: Training["exclusions"] = [];
  let largestTotalWeight = 0;
  for (let epoch = 0; epoch < EPOCHS; epoch++) {
    // Every member, the attacker included, announces an honest peer's samples and throughput.
    for (const swarm of swarms) {
      swarm.progress.report({ epoch, samplesAccumulated: SAMPLES, samplesPerSecond: SAMPLES });
    }
    await Promise.all(swarms.map((swarm) => swarm.progress.pushNow()));
    await eventually(
      () =>
        swarms.every(
          (swarm) =>
            swarm.progress.records().filter((entry) => entry.record.epoch === epoch).length === HONEST,
        ),
      `everyone at epoch ${epoch}`,
      30_000,
    );
    await Promise.all(
      swarms.map(async (swarm, k) => {
        const own = at(parameters, k);
        const { gradient } = lossAndGradient(own, at(data, k));
        const lying = attack && swarm === attacker;
        const averaging = swarm.averager.average(
          epoch,
          lying ? gradient.map((value) => value * 1000) : gradient,
          lying ? CLAIMED_WEIGHT : SAMPLES,
        );
        if (lying) {
          await averaging.catch(() => undefined);
          return;
        }
        const outcome = await averaging;
        if (k < HONEST) {
          exclusions.push(...(outcome.exclusions ?? []));
          largestTotalWeight = Math.max(largestTotalWeight, outcome.totalWeight);
        }
        for (let i = 0; i < DIMENSION; i++) own[i] = at(own, i) - LEARNING_RATE * at(outcome.vector, i);
      }),
    );
  }
  const honest = parameters.slice(0, HONEST);
  const reference = Buffer.from(at(honest, 0).buffer);
  const result: Training = {
    initialLoss,
    finalLoss: honestLoss(at(parameters, 0)),
    largestTotalWeight,
    exclusions,
    attackerPeerId: attacker.node.peerId,
    agree: honest.every((weights) => Buffer.from(weights.buffer).equals(reference)),
  };
  await Promise.all(swarms.splice(0).map((swarm) => swarm.stop().catch(() => undefined)));
  return result;
}

describe("a member declaring a weight its progress records did not earn (real swarm)", () => {
  it("is refused by every honest reducer; the honest peers train as in a clean run", async () => {
    const clean = await train(false);
    expect(clean.agree).toBe(true);
    expect(clean.finalLoss).toBeLessThan(0.2 * clean.initialLoss);
    expect(clean.exclusions).toEqual([]);

    const attacked = await train(true);
    expect(attacked.agree).toBe(true);
    // Without the check the claimed weight makes the mean the attacker's scaled gradient.
    expect(Math.abs(attacked.finalLoss - clean.finalLoss)).toBeLessThan(0.05 * clean.finalLoss);
    expect(attacked.largestTotalWeight).toBeLessThanOrEqual(HONEST * SAMPLES);
    expect(attacked.exclusions.length).toBeGreaterThanOrEqual(EPOCHS);
    for (const exclusion of attacked.exclusions) {
      expect(exclusion).toEqual({ peer: attacked.attackerPeerId, reason: "unearned" });
    }
  }, 300_000);
});
