import { sendingNaNOn } from "./support/nan-stream.ts";
import { afterEach, describe, expect, it } from "vitest";
import type { ExperimentConfigInput } from "@barnraise/protocol";
import type { Rpc, RpcFrameStream } from "../src/rpc/rpc.ts";
import type { Swarm } from "../src/swarm.ts";
import { at } from "./support/at.ts";
import { lossAndGradient, regressionDataset, type RegressionDataset } from "./support/linear-regression.ts";
import { eventually, TestAuthority } from "./support/swarm-fixtures.ts";
import { startSwarm, testConfig } from "./support/swarm-harness.ts";

/**
 * The attack of "open collaborations under attack": eight peers of a real swarm train a linear
 * regression with plain SGD on the swarm's averaged gradient, and one of them is malicious: it
 * sends its gradient scaled by 1,000, sign-flipped (and amplified), or NaN. With `mean` the first
 * two drive the loss up; with `centered-clip` training ends as it does without an attacker. NaN is
 * refused either way.
 */

const PEERS = 8;
const ATTACKER = 5;
const DIMENSION = 48;
const SAMPLES = 1536;
const EPOCHS = 10;
const LEARNING_RATE = 0.5;
const TRUE_WEIGHTS = Float64Array.from({ length: DIMENSION }, (_, i) => Math.sin(i + 1));

type Attack = "none" | "scaled" | "sign-flipped" | "nan";

type Dataset = RegressionDataset;

/** Each peer's own samples, from its own seeded stream. */
function dataset(peer: number): Dataset {
  return regressionDataset(1_000 + peer, SAMPLES, TRUE_WEIGHTS);
}

/** The loss over every honest peer's data. */
function honestLoss(weights: Float32Array, data: readonly Dataset[]): number {
  const losses = data.flatMap((peerData, k) =>
    k === ATTACKER ? [] : [lossAndGradient(weights, peerData).loss],
  );
  return losses.reduce((sum, loss) => sum + loss, 0) / losses.length;
}

/**
 * Makes every all-reduce stream `swarm` opens carry NaN in the last value of each chunk it sends.
 * Refused, the attacker keeps quiet on that stream instead of giving up its round, as an attacker
 * that means to stay in the group would: it keeps its other streams open, so every honest reducer
 * reads its NaN (an honest peer that learns it was refused withdraws its other uploads, and a
 * reducer that sees that first reports the exclusion as "failed").
 */
function sendNaN(swarm: Swarm): void {
  const rpc: Rpc = swarm.node.rpc;
  const call = rpc.call.bind(rpc);
  const spoil = (stream: RpcFrameStream): RpcFrameStream => sendingNaNOn(stream, { quietWhenRefused: true });
  const spoiling: Rpc["call"] = async (peer, method, head, options) => {
    const opened = await call(peer, method, head, options);
    return method.name === "allreduce" ? { ...opened, stream: spoil(opened.stream) } : opened;
  };
  Object.assign(rpc, { call: spoiling });
}

/** What the attacker makes of its gradient before it is averaged. */
function corrupt(gradient: Float32Array, attack: Attack): Float32Array {
  if (attack === "scaled") return gradient.map((value) => value * 1000);
  // Flipped alone, one peer in eight only slows the mean down; amplified, it reverses it.
  if (attack === "sign-flipped") return gradient.map((value) => value * -20);
  return gradient;
}

const swarms: Swarm[] = [];

afterEach(async () => {
  await Promise.all(swarms.splice(0).map((swarm) => swarm.stop().catch(() => undefined)));
});

interface Training {
  initialLoss: number;
  finalLoss: number;
  /** Per honest peer, the exclusions its steps reported. */
  exclusions: { peer: string; reason: string }[][];
  attackerPeerId: string;
  /** Whether every honest peer ended with the same parameters. */
  agree: boolean;
}

/** Eight peers train for EPOCHS steps with `aggregation`, the attacker attacking with `attack`. */
async function train(aggregation: "mean" | "centered-clip", attack: Attack): Promise<Training> {
  const authority = new TestAuthority();
  const config: ExperimentConfigInput = {
    ...testConfig,
    averaging: {
      ...testConfig.averaging,
      matchmakingTimeoutMs: 5_000,
      allreduceTimeoutMs: 10_000,
      // 64 values a chunk: the reducers aggregate their parts chunk by chunk.
      chunkSizeBytes: 1024,
      // Equal parts whatever the measured links, so every run chunks the vector the same way.
      loadBalancing: false,
      // CenteredClip with its defaults (τ = 1, 10 iterations), as a run published from the form has.
      aggregation,
    },
  };
  const first = await startSwarm(authority, { config });
  swarms.push(first);
  const bootstrap = first.node.multiaddrs();
  for (let k = 1; k < PEERS; k++) swarms.push(await startSwarm(authority, { config, bootstrap }));
  await eventually(
    () => swarms.every((swarm) => swarm.node.members().length === PEERS - 1),
    "meshed",
    30_000,
  );
  if (attack === "nan") sendNaN(at(swarms, ATTACKER));

  const data = swarms.map((_, k) => dataset(k));
  const parameters = swarms.map(() => new Float32Array(DIMENSION));
  const exclusions: { peer: string; reason: string }[][] = swarms.map(() => []);
  const initialLoss = honestLoss(at(parameters, 0), data);
  for (let epoch = 0; epoch < EPOCHS; epoch++) {
    for (const swarm of swarms)
      swarm.progress.report({ epoch, samplesAccumulated: SAMPLES, samplesPerSecond: SAMPLES });
    await Promise.all(swarms.map((swarm) => swarm.progress.pushNow()));
    await eventually(
      () =>
        swarms.every(
          (swarm) =>
            swarm.progress.records().filter((entry) => entry.record.epoch === epoch).length === PEERS - 1,
        ),
      `everyone at epoch ${epoch}`,
      30_000,
    );
    await Promise.all(
      swarms.map(async (swarm, k) => {
        const own = at(parameters, k);
        const { gradient } = lossAndGradient(own, at(data, k));
        const sent = k === ATTACKER ? corrupt(gradient, attack) : gradient;
        const averaging = swarm.averager.average(epoch, sent, SAMPLES);
        if (k === ATTACKER && attack === "nan") {
          // Refused by every other reducer and deaf to it, the attacker's round only ends at its
          // result deadline.
          averaging.catch(() => undefined);
          return;
        }
        const outcome = await averaging;
        at(exclusions, k).push(...(outcome.exclusions ?? []));
        for (let i = 0; i < DIMENSION; i++) own[i] = at(own, i) - LEARNING_RATE * at(outcome.vector, i);
      }),
    );
  }
  const honest = parameters.filter((_, k) => k !== ATTACKER);
  const reference = Buffer.from(at(honest, 0).buffer);
  const result: Training = {
    initialLoss,
    finalLoss: honestLoss(at(parameters, 0), data),
    exclusions: exclusions.filter((_, k) => k !== ATTACKER),
    attackerPeerId: at(swarms, ATTACKER).node.peerId,
    agree: honest.every((weights) => Buffer.from(weights.buffer).equals(reference)),
  };
  await Promise.all(swarms.splice(0).map((swarm) => swarm.stop().catch(() => undefined)));
  return result;
}

describe("training under attack by one peer in eight", () => {
  it("diverges with mean and stays on course with centered-clip against scaled and sign-flipped gradients; refuses NaN with both", async () => {
    const clean = await train("mean", "none");
    expect(clean.agree).toBe(true);
    expect(clean.finalLoss).toBeLessThan(0.1 * clean.initialLoss);
    for (const attack of ["scaled", "sign-flipped"] as const) {
      const mean = await train("mean", attack);
      const clipped = await train("centered-clip", attack);
      // Mean: one peer's vector moves everyone's parameters far away.
      expect(!Number.isFinite(mean.finalLoss) || mean.finalLoss > 10 * clean.initialLoss).toBe(true);
      // CenteredClip: within 5 % of the clean run's loss, nobody excluded (the values are finite).
      expect(clipped.agree).toBe(true);
      expect(Math.abs(clipped.finalLoss - clean.finalLoss)).toBeLessThan(0.05 * clean.finalLoss);
      for (const reported of clipped.exclusions) expect(reported).toEqual([]);
    }
    for (const aggregation of ["mean", "centered-clip"] as const) {
      const nan = await train(aggregation, "nan");
      expect(nan.agree).toBe(true);
      expect(Number.isFinite(nan.finalLoss)).toBe(true);
      expect(nan.finalLoss).toBeLessThan(0.1 * clean.initialLoss);
      // Every honest peer's reducer refused the attacker's chunks in every round.
      for (const reported of nan.exclusions) {
        expect(reported).toHaveLength(EPOCHS);
        for (const exclusion of reported) {
          expect(exclusion).toEqual({ peer: nan.attackerPeerId, reason: "non-finite" });
        }
      }
    }
  }, 600_000);
});
