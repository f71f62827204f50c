import { describe, expect, it } from "vitest";
import { AllReduceService, type AllReduceResult } from "../../src/averaging/butterfly-allreduce.ts";
import type { GroupMember } from "../../src/averaging/partition.ts";
import { at } from "../support/at.ts";
import { MemoryRpcNetwork } from "../support/memory-rpc.ts";
import { seededRandom } from "../support/seeded-random.ts";

/**
 * The bounds a reducer puts on declared weights: a sender declaring more than its records earned
 * is refused ("unearned"), and no weight counts for more than `maxWeightRatio` times the group's
 * lower median in the aggregate, while the result's total weight still counts the samples.
 */

const LENGTH = 600;

function vectors(count: number, seed: number): Float32Array[] {
  const random = seededRandom(seed);
  return Array.from({ length: count }, () => Float32Array.from({ length: LENGTH }, () => random() * 2 - 1));
}

function weightedMean(inputs: readonly Float32Array[], weights: readonly number[]): Float64Array {
  const total = weights.reduce((sum, weight) => sum + weight, 0);
  const mean = new Float64Array(LENGTH);
  inputs.forEach((vector, k) => {
    for (let i = 0; i < LENGTH; i++) mean[i] = at(mean, i) + (at(weights, k) * at(vector, i)) / total;
  });
  return mean;
}

function maxDifference(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let largest = 0;
  for (let i = 0; i < a.length; i++) largest = Math.max(largest, Math.abs(at(a, i) - at(b, i)));
  return largest;
}

async function round(
  weights: readonly number[],
  inputs: readonly Float32Array[],
  bounds: { maxWeightRatio?: number; earnedWeight?: (peerId: string, declared: number) => Promise<number> },
): Promise<PromiseSettledResult<AllReduceResult>[]> {
  const network = new MemoryRpcNetwork();
  const members: GroupMember[] = weights.map((weight, k) => ({ peerId: `m${k}`, mode: "node", weight }));
  const services = members.map((member) => {
    const service = new AllReduceService({ rpc: network.add(member.peerId) });
    service.start();
    return service;
  });
  const settled = await Promise.allSettled(
    members.map((member, k) =>
      at(services, k).run({
        group: { groupId: "bounds", members, fractions: members.map(() => 1 / members.length) },
        partCounts: members.map(() => LENGTH / members.length),
        compression: { method: "none" },
        chunkSizeBytes: 400,
        timeoutMs: 10_000,
        vector: at(inputs, k),
        weight: member.weight,
        ...bounds,
      }),
    ),
  );
  for (const service of services) service.stop();
  return settled;
}

function fulfilled(outcome: PromiseSettledResult<AllReduceResult> | undefined): AllReduceResult {
  if (outcome?.status !== "fulfilled") throw new Error(`the round failed: ${String(outcome?.status)}`);
  return outcome.value;
}

describe("weight bounds in the butterfly all-reduce", () => {
  it("leave an honest heterogeneous group's weighted mean as it is (one member 10x the others)", async () => {
    const weights = [32, 32, 320];
    const inputs = vectors(3, 1);
    const results = (await round(weights, inputs, { maxWeightRatio: 16 })).map(fulfilled);
    for (const result of results) {
      expect(maxDifference(result.vector, weightedMean(inputs, weights))).toBeLessThan(1e-6);
      expect(result.totalWeight).toBe(384);
    }
  });

  it("count a weight far above the group's median as the cap, and still count its samples", async () => {
    const weights = [32, 32, 32, 1e15];
    const inputs = vectors(4, 2);
    const results = (await round(weights, inputs, { maxWeightRatio: 16 })).map(fulfilled);
    for (const result of results) {
      expect(maxDifference(result.vector, weightedMean(inputs, [32, 32, 32, 16 * 32]))).toBeLessThan(1e-6);
      expect(result.totalWeight).toBe(96 + 1e15);
    }
  });

  it("refuse a sender declaring more than it earned, at every honest reducer", async () => {
    const weights = [32, 32, 32, 5_000];
    const inputs = vectors(4, 3);
    const earned = new Map([
      ["m0", 40],
      ["m1", 40],
      ["m2", 40],
      ["m3", 40],
    ]);
    const settled = await round(weights, inputs, {
      earnedWeight: (peer) => Promise.resolve(earned.get(peer) ?? 0),
    });
    // The liar is told it was refused; the others average without its samples (each reducer but
    // its own left it out; its own part is the liar's to reduce, a validator's concern).
    expect(at(settled, 3).status).toBe("rejected");
    for (const outcome of settled.slice(0, 3)) {
      const result = fulfilled(outcome);
      expect(result.excluded).toEqual(["m3"]);
      expect(result.exclusions).toContainEqual({ peer: "m3", reason: "unearned" });
    }
  });

  it("hold a sender's stream while the record that earns its weight is on its way, then average it", async () => {
    const weights = [32, 32, 32];
    const inputs = vectors(3, 4);
    // Every reducer learns what m2 earned only 200 ms after m2's stream arrived.
    const late = (peer: string) =>
      new Promise<number>((resolve) => {
        setTimeout(() => {
          resolve(peer === "m2" ? 40 : 32);
        }, 200);
      });
    const results = (await round(weights, inputs, { earnedWeight: late })).map(fulfilled);
    for (const result of results) {
      expect(result.excluded).toEqual([]);
      expect(maxDifference(result.vector, weightedMean(inputs, weights))).toBeLessThan(1e-6);
      expect(result.totalWeight).toBe(96);
    }
  });
});
