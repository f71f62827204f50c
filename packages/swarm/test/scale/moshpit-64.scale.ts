import { availableParallelism } from "node:os";
import { peerIdFromString } from "@libp2p/peer-id";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { at } from "../support/at.ts";
import { eventually, TestAuthority, testGrantOf } from "../support/swarm-fixtures.ts";
import {
  maxAbsDifference,
  randomVector,
  seededRandom,
  testConfig,
  weightedMean,
} from "../support/swarm-harness.ts";
import { ThreadedSwarms, type AverageReply } from "../support/swarm-threads.ts";

/**
 * 64 real swarms (libp2p on loopback, in this process, over worker threads) train with
 * Moshpit averaging: Appendix C's group size for 64 peers is 8, so each step averages in two
 * rounds of 8×8 grid cells, and after each step every trainer holds the same parameters.
 */

const N = 64;
/** One event loop per core (at least two, at most eight): 64 nodes on one loop stall for seconds. */
const THREADS = Math.max(2, Math.min(8, availableParallelism()));
let swarms: ThreadedSwarms | undefined;
afterAll(async () => {
  await swarms?.stop();
});

function succeeded(
  epoch: number,
  replies: readonly AverageReply[],
): Array<Exclude<AverageReply, { error: string }>> {
  const failures = replies.flatMap((reply, k) => ("error" in reply ? [`trainer ${k}: ${reply.error}`] : []));
  if (failures.length > 0) {
    throw new Error(
      `${failures.length} of ${N} trainers failed to average epoch ${epoch}:\n${failures.join("\n")}`,
    );
  }
  return replies.filter((reply): reply is Exclude<AverageReply, { error: string }> => !("error" in reply));
}

const authority = new TestAuthority("exp-moshpit-64");

describe("Moshpit averaging among 64 real swarms", () => {
  beforeAll(async () => {
    const config = {
      ...testConfig,
      averaging: {
        ...testConfig.averaging,
        maxGroupSize: 16,
        // Only complete cells close within a minute: a failed round fails the test instead of hanging.
        matchmakingTimeoutMs: 60_000,
        allreduceTimeoutMs: 120_000,
      },
    };
    swarms = await ThreadedSwarms.start(authority, config, N, THREADS);
    const threaded = swarms;
    await eventually(
      async () => (await threaded.members()).every((count) => count === N - 1),
      "the 64 swarms are fully meshed",
      180_000,
    );
  }, 300_000);

  it("64 trainers train 3 SGD steps in 8×8 cells: parameters agree after every step", async () => {
    const threaded = present(swarms);
    const random = seededRandom(11);
    const length = 500;
    // Trainer k minimizes ½‖θ − c_k‖²; with weights w_k the swarm minimizes their weighted sum,
    // whose optimum is the weighted mean of the c_k.
    const targets = Array.from({ length: N }, () => randomVector(length, random));
    const weights = Array.from({ length: N }, () => 1 + Math.floor(random() * 50));
    const total = weights.reduce((sum, weight) => sum + weight, 0);
    const optimum = weightedMean(targets, weights);
    const parameters = Array.from({ length: N }, () => new Float32Array(length));
    const learningRate = 0.5;
    for (let epoch = 0; epoch < 3; epoch++) {
      await threaded.report(epoch, weights);
      await eventually(
        async () => (await threaded.records(epoch)).every((count) => count === N - 1),
        `every trainer sees the other 63 at epoch ${epoch}`,
        120_000,
      );
      // Appendix C's optimal m for n = 64 with p = 0.01 is 8: two rounds (2 / 0.99⁸ ≈ 2.17
      // expected iterations), against 2.35 for m = 16 and 3.12 for m = 4.
      expect(await threaded.radices(epoch)).toEqual([8, 8]);
      const gradients = parameters.map((theta, k) => theta.map((value, i) => value - at(at(targets, k), i)));
      const results = succeeded(epoch, await threaded.average(epoch, gradients, weights));
      const expected = weightedMean(gradients, weights);
      results.forEach((result, k) => {
        expect(result.rounds).toBe(2);
        expect(result.totalWeight).toBe(total);
        expect(maxAbsDifference(result.vector, expected)).toBeLessThan(1e-5);
        const theta = at(parameters, k);
        for (let i = 0; i < length; i++) theta[i] = at(theta, i) - learningRate * at(result.vector, i);
      });
      for (const theta of parameters) expect(maxAbsDifference(theta, at(parameters, 0))).toBeLessThan(1e-5);
    }
    // Three steps of rate ½ leave (½)³ of the initial distance to the optimum.
    const initial = maxAbsDifference(new Float32Array(length), optimum);
    expect(maxAbsDifference(at(parameters, 0), optimum)).toBeLessThan(initial / 8 + 1e-5);
  }, 600_000);

  it("a banned trainer is refused by all 63 others within 30 s of the platform's control reaching one", async () => {
    const threaded = present(swarms);
    const banned = at(threaded.peerIds, N - 1);
    const publicKey = peerIdFromString(banned).publicKey?.raw;
    if (publicKey === undefined) throw new Error("the banned peer's id carries no key");
    const token = authority.runControl({ revokedGrants: [testGrantOf(publicKey)] });
    const started = performance.now();
    await threaded.offerControl(0, token);
    await eventually(
      async () => (await threaded.refuses(banned, 1)).filter((refuses) => refuses === 1).length === N - 1,
      "every other trainer refuses the banned one",
      30_000,
    );
    process.stdout.write(
      `a ban reached and cut off the banned peer at all ${N - 1} others in ${((performance.now() - started) / 1000).toFixed(1)} s\n`,
    );
  }, 60_000);
});

function present<T>(value: T | undefined): T {
  if (value === undefined) throw new Error("the swarms did not start");
  return value;
}
