import { afterEach, describe, expect, it } from "vitest";
import type { Swarm } from "../src/swarm.ts";
import { at } from "./support/at.ts";
import { eventually, TestAuthority } from "./support/swarm-fixtures.ts";
import {
  maxAbsDifference,
  randomVector,
  reportAndSync,
  seededRandom,
  startSwarm,
  testConfig,
  weightedMean,
} from "./support/swarm-harness.ts";

/**
 * Moshpit averaging among real swarms (libp2p on loopback, in process): more trainers than one
 * group may hold average in grid cells of the size Appendix C prescribes, each cell closing as soon
 * as the members its plan names have joined, and d rounds give everyone the global weighted mean.
 */

const swarms: Swarm[] = [];
afterEach(async () => {
  await Promise.all(swarms.splice(0).map((swarm) => swarm.stop().catch(() => undefined)));
});

/** `n` trainers meshed with each other; no deadline would ever close a cell: only completeness does. */
async function startTrainers(n: number, maxGroupSize: number): Promise<Swarm[]> {
  const authority = new TestAuthority();
  const config = {
    ...testConfig,
    averaging: {
      ...testConfig.averaging,
      maxGroupSize,
      matchmakingTimeoutMs: 600_000,
      allreduceTimeoutMs: 60_000,
    },
  };
  const first = await startSwarm(authority, { config });
  swarms.push(first);
  const bootstrap = first.node.multiaddrs();
  for (let started = 1; started < n; started += 8) {
    const batch = await Promise.all(
      Array.from({ length: Math.min(8, n - started) }, () => startSwarm(authority, { config, bootstrap })),
    );
    swarms.push(...batch);
  }
  await eventually(
    () => swarms.every((swarm) => swarm.node.members().length === n - 1),
    "the swarm is fully meshed",
    120_000,
  );
  return [...swarms];
}

describe("Moshpit averaging among real swarms", () => {
  it("20 trainers in groups of 5: two rounds per step, each trainer ends with the global weighted mean", async () => {
    const members = await startTrainers(20, 5);
    const random = seededRandom(7);
    for (let epoch = 0; epoch < 3; epoch++) {
      const vectors = members.map(() => randomVector(2_000, random));
      const weights = members.map(() => 1 + Math.floor(random() * 50));
      await reportAndSync(members, epoch, weights, 60_000);
      const plan = at(members, 0).averager.plan(epoch);
      expect(plan.dimensions).toBe(2);
      expect(plan.radices).toEqual([5, 4]);
      const results = await Promise.all(
        members.map((swarm, k) => swarm.averager.average(epoch, at(vectors, k), at(weights, k))),
      );
      const expected = weightedMean(vectors, weights);
      const total = weights.reduce((sum, weight) => sum + weight, 0);
      for (const result of results) {
        expect(result.rounds).toBe(2);
        expect(result.groupSize).toBe(4); // the last round's cells: one peer of each of 4 rows
        expect(result.totalWeight).toBe(total);
        expect(maxAbsDifference(result.vector, expected)).toBeLessThan(1e-5);
      }
    }
  }, 300_000);
});
