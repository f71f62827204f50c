import { sendingNaNOn } from "../support/nan-stream.ts";
import { describe, expect, it } from "vitest";
import {
  AllReduceService,
  type AllReduceResult,
  type AllReduceRunOptions,
} from "../../src/averaging/butterfly-allreduce.ts";
import type { GroupMember } from "../../src/averaging/partition.ts";
import type { Aggregator } from "../../src/averaging/aggregation/aggregator.ts";
import { CenteredClip } from "../../src/averaging/aggregation/centered-clip.ts";
import { weightedMean } from "../../src/averaging/aggregation/weighted-mean.ts";
import { SwarmErrorCode } from "../../src/errors.ts";
import type { Rpc, RpcFrameStream } from "../../src/rpc/rpc.ts";
import { at } from "../support/at.ts";
import { MemoryRpcNetwork } from "../support/memory-rpc.ts";
import { seededRandom } from "../support/seeded-random.ts";

/**
 * Robust aggregation in the butterfly all-reduce: eight members on a memory network, one of them
 * sending an outlier (its vector scaled up) or non-finite values.
 */

const LENGTH = 4000;
const MEMBERS: GroupMember[] = Array.from({ length: 8 }, (_, i) => ({
  peerId: `m${i}`,
  mode: "node",
  weight: 1 + (i % 3),
}));
const ATTACKER = "m3";
const MEAN: Aggregator = weightedMean;
const CLIP: Aggregator = new CenteredClip(2, 10);

/** Honest vectors: the same direction for every member plus a little noise of its own. */
function honestVectors(seed: number): Map<string, Float32Array> {
  const random = seededRandom(seed);
  const direction = Float32Array.from({ length: LENGTH }, () => random() * 2 - 1);
  return new Map(
    MEMBERS.map((member) => [member.peerId, direction.map((value) => value + (random() * 2 - 1) * 0.05)]),
  );
}

/** An Rpc whose opened all-reduce streams write every chunk with its last float32 set to NaN. */
function sendingNaN(rpc: Rpc): Rpc {
  const spoil = (stream: RpcFrameStream): RpcFrameStream => sendingNaNOn(stream);
  return {
    peerId: rpc.peerId,
    call: async (peer, method, head, options) => {
      const result = await rpc.call(peer, method, head, options);
      return { ...result, stream: spoil(result.stream) };
    },
    request: (peer, method, head, options) => rpc.request(peer, method, head, options),
    handle: (method, handler) => {
      rpc.handle(method, handler);
    },
    unhandle: (method) => {
      rpc.unhandle(method);
    },
  };
}

/** One round of all eight members; `nanSender` writes NaN into every chunk it sends. */
async function round(
  vectors: ReadonlyMap<string, Float32Array>,
  aggregator: Aggregator | undefined,
  nanSender?: string,
): Promise<Map<string, PromiseSettledResult<AllReduceResult>>> {
  const network = new MemoryRpcNetwork();
  const group = {
    groupId: "robust",
    members: MEMBERS,
    fractions: MEMBERS.map(() => 1 / MEMBERS.length),
  };
  const common: Omit<AllReduceRunOptions, "vector" | "weight"> = {
    group,
    partCounts: MEMBERS.map(() => LENGTH / MEMBERS.length),
    compression: { method: "none" },
    // 256 elements a chunk: every part of 500 streams in two chunks.
    chunkSizeBytes: 1024,
    timeoutMs: 20_000,
    ...(aggregator === undefined ? {} : { aggregator }),
  };
  const services = MEMBERS.map((member) => {
    const rpc = network.add(member.peerId);
    const service = new AllReduceService({ rpc: member.peerId === nanSender ? sendingNaN(rpc) : rpc });
    service.start();
    return service;
  });
  const settled = await Promise.allSettled(
    MEMBERS.map((member, k) =>
      at(services, k).run({
        ...common,
        vector: vectors.get(member.peerId) ?? new Float32Array(),
        weight: member.weight,
      }),
    ),
  );
  for (const service of services) service.stop();
  return new Map(MEMBERS.map((member, k) => [member.peerId, at(settled, k)]));
}

function fulfilled(outcome: PromiseSettledResult<AllReduceResult> | undefined): AllReduceResult {
  if (outcome?.status !== "fulfilled") throw new Error(`the round failed: ${String(outcome?.status)}`);
  return outcome.value;
}

/** Float64 weighted mean over the members, leaving `without` out. */
function honestMean(vectors: ReadonlyMap<string, Float32Array>, without: string): Float64Array {
  const mean = new Float64Array(LENGTH);
  let total = 0;
  for (const member of MEMBERS) {
    if (member.peerId === without) continue;
    const vector = vectors.get(member.peerId) ?? new Float32Array();
    for (let i = 0; i < LENGTH; i++) mean[i] = at(mean, i) + member.weight * at(vector, i);
    total += member.weight;
  }
  return mean.map((value) => value / total);
}

function distance(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let squares = 0;
  for (let i = 0; i < a.length; i++) squares += (at(a, i) - at(b, i)) ** 2;
  return Math.sqrt(squares);
}

function bitIdentical(results: readonly AllReduceResult[]): boolean {
  const first = Buffer.from(at(results, 0).vector.buffer);
  return results.every((result) => Buffer.from(result.vector.buffer).equals(first));
}

describe("robust aggregation in the butterfly all-reduce", () => {
  it("with mean, an explicit mean and no aggregation give the same bits", async () => {
    const vectors = honestVectors(1);
    const implicit = await round(vectors, undefined);
    const explicit = await round(vectors, MEAN);
    for (const member of MEMBERS) {
      const a = fulfilled(implicit.get(member.peerId)).vector;
      const b = fulfilled(explicit.get(member.peerId)).vector;
      expect(Buffer.from(a.buffer).equals(Buffer.from(b.buffer))).toBe(true);
    }
  });

  it("with centered-clip, an outlier scaled by 1,000 barely moves the result; with mean it moves it far", async () => {
    const vectors = honestVectors(2);
    const honest = honestMean(vectors, ATTACKER);
    const attacked = new Map(vectors);
    attacked.set(
      ATTACKER,
      (vectors.get(ATTACKER) ?? new Float32Array()).map((value) => value * 1000),
    );
    const spread = distance(vectors.get("m0") ?? [], honest);

    const mean = [...(await round(attacked, MEAN)).values()].map(fulfilled);
    const clipped = [...(await round(attacked, CLIP)).values()].map(fulfilled);
    expect(bitIdentical(mean)).toBe(true);
    expect(bitIdentical(clipped)).toBe(true);
    // Mean: about weight share × 1,000 × the vector's norm away. CenteredClip: within the spread.
    expect(distance(at(mean, 0).vector, honest)).toBeGreaterThan(100 * spread);
    expect(distance(at(clipped, 0).vector, honest)).toBeLessThan(spread);
    // Nobody was excluded: the outlier's values are finite, only its influence is bounded.
    for (const result of clipped) expect(result.excluded).toEqual([]);

    // Without an attacker, CenteredClip stays close to the mean.
    const clean = [...(await round(vectors, CLIP)).values()].map(fulfilled);
    const cleanMean = [...(await round(vectors, MEAN)).values()].map(fulfilled);
    expect(distance(at(clean, 0).vector, at(cleanMean, 0).vector)).toBeLessThan(0.2 * spread);
  });

  it.each([
    ["mean", MEAN],
    ["centered-clip", CLIP],
  ])("with %s, refuses a sender of NaN values and reports it as non-finite", async (_, aggregation) => {
    const vectors = honestVectors(3);
    const outcomes = await round(vectors, aggregation, ATTACKER);
    const honest = MEMBERS.filter((member) => member.peerId !== ATTACKER).map((member) =>
      fulfilled(outcomes.get(member.peerId)),
    );
    expect(bitIdentical(honest)).toBe(true);
    for (const result of honest) {
      expect(result.excluded).toEqual([ATTACKER]);
      expect(result.exclusions).toEqual([{ peer: ATTACKER, reason: "non-finite" }]);
      for (const value of result.vector) expect(Number.isFinite(value)).toBe(true);
    }
    // Every part the attacker did not reduce is the honest members' aggregate.
    const expected = honestMean(vectors, ATTACKER);
    const attackerPart =
      MEMBERS.findIndex((member) => member.peerId === ATTACKER) * (LENGTH / MEMBERS.length);
    const result = at(honest, 0).vector;
    const others = (values: ArrayLike<number>) =>
      Array.from(values).filter((_, i) => i < attackerPart || i >= attackerPart + LENGTH / MEMBERS.length);
    expect(distance(others(result), others(expected))).toBeLessThan(
      aggregation === MEAN ? 1e-4 : 0.2 * distance(vectors.get("m0") ?? [], expected),
    );
  });
});

describe("a sender refused by its reducers", () => {
  // Four members, one sending NaN. Parts of 16 chunks streamed two at a time: the refusals come
  // while every reducer, the refused sender's own included, is still reducing its part.
  const PART = 16 * 256;
  const GROUP: GroupMember[] = [
    { peerId: "h0", mode: "node", weight: 1 },
    { peerId: "h1", mode: "node", weight: 2 },
    { peerId: "nan", mode: "node", weight: 3 },
    { peerId: "h3", mode: "node", weight: 1 },
  ];

  it("fails its own round as refused for non-finite values; the other three average without it", async () => {
    const random = seededRandom(4);
    const vectors = GROUP.map(() => Float32Array.from({ length: 4 * PART }, () => random() * 2 - 1));
    const network = new MemoryRpcNetwork();
    const services = GROUP.map((member) => {
      const rpc = network.add(member.peerId);
      const service = new AllReduceService({ rpc: member.peerId === "nan" ? sendingNaN(rpc) : rpc });
      service.start();
      return service;
    });
    const settled = await Promise.allSettled(
      GROUP.map((member, k) =>
        at(services, k).run({
          group: { groupId: "refused", members: GROUP, fractions: GROUP.map(() => 0.25) },
          partCounts: GROUP.map(() => PART),
          vector: at(vectors, k),
          weight: member.weight,
          compression: { method: "none" },
          chunkSizeBytes: 1024,
          chunksInFlight: 2,
          timeoutMs: 20_000,
        }),
      ),
    );
    for (const service of services) service.stop();

    // The sender learns it was refused, and why: not that a reducer is unreachable.
    const refused = at(settled, 2);
    expect(refused.status).toBe("rejected");
    expect(refused.status === "rejected" ? refused.reason : undefined).toMatchObject({
      code: SwarmErrorCode.ALLREDUCE_REFUSED,
      remoteCode: "non-finite",
      message: expect.stringMatching(/^refused by reducer h[013]: non-finite$/) as unknown,
    });
    const honest = [0, 1, 3].map((k) => fulfilled(at(settled, k)));
    expect(bitIdentical(honest)).toBe(true);
    for (const result of honest) {
      expect(result.exclusions).toEqual([{ peer: "nan", reason: "non-finite" }]);
    }
    // The honest reducers' parts are the mean of the three honest vectors; the refused sender's
    // own part is what it reduced (its own values in it), served to everyone.
    const mean = (i: number) => {
      let sum = 0;
      let total = 0;
      for (const k of [0, 1, 3]) {
        sum += at(GROUP, k).weight * at(at(vectors, k), i);
        total += at(GROUP, k).weight;
      }
      return sum / total;
    };
    const result = at(honest, 0).vector;
    let worst = 0;
    for (let i = 0; i < result.length; i++) {
      if (i >= 2 * PART && i < 3 * PART) continue;
      worst = Math.max(worst, Math.abs(at(result, i) - mean(i)));
    }
    expect(worst).toBeLessThan(1e-6);
    expect(result.every((value) => Number.isFinite(value))).toBe(true);
  });
});
