import { parseExperimentConfig } from "@barnraise/protocol";
import { describe, expect, it } from "vitest";
import { Averager } from "../../src/averaging/averager.ts";
import {
  AllReduceService,
  type AllReduceResult,
  type AllReduceRunOptions,
} from "../../src/averaging/butterfly-allreduce.ts";
import type { FormedGroup, Matchmaking } from "../../src/averaging/matchmaking.ts";
import {
  chunkElementsFor,
  chunkRanges,
  partRanges,
  type GroupMember,
} from "../../src/averaging/partition.ts";
import { compressorFor, compressWithFeedback } from "../../src/compression/index.ts";
import { MemoryRpcNetwork } from "../support/memory-rpc.ts";
import { seededRandom } from "../support/seeded-random.ts";
import { silentLogger } from "../support/swarm-fixtures.ts";

/** An all-reduce service per member on one memory network. */
function services(members: readonly GroupMember[]): AllReduceService[] {
  const network = new MemoryRpcNetwork();
  return members.map((member) => {
    const service = new AllReduceService({
      rpc: network.add(member.peerId, member.mode === "aux" ? "aux" : "trainer"),
    });
    service.start();
    return service;
  });
}

function randomVector(seed: number, length: number): Float32Array {
  const next = seededRandom(seed);
  return Float32Array.from({ length }, () => (next() * 2 - 1) * (1 + 3 * next()));
}

function nodes(count: number, weight = 1): GroupMember[] {
  return Array.from({ length: count }, (_, i) => ({ peerId: `m${i}`, mode: "node" as const, weight }));
}

interface Round {
  members: readonly GroupMember[];
  partCounts: readonly number[];
  vectors: Float32Array[];
  residuals: (Float32Array | undefined)[];
  compression: AllReduceRunOptions["compression"];
  chunkSizeBytes: number;
}

function runRound(round: Round, groupId: string): Promise<AllReduceResult[]> {
  const { members } = round;
  const reducers = members.filter((member) => member.mode !== "client").length;
  const group = {
    groupId,
    members,
    fractions: members.map((member) => (member.mode === "client" ? 0 : 1 / reducers)),
  };
  return Promise.all(
    services(members).map((service, i) => {
      const residual = round.residuals[i];
      return service.run({
        group,
        partCounts: round.partCounts,
        vector: round.vectors[i] ?? new Float32Array(0),
        weight: members[i]?.weight ?? 0,
        compression: round.compression,
        chunkSizeBytes: round.chunkSizeBytes,
        timeoutMs: 20_000,
        ...(residual === undefined ? {} : { residual }),
      });
    }),
  );
}

function bytesOf(vector: Float32Array): Buffer {
  return Buffer.from(vector.buffer, vector.byteOffset, vector.byteLength);
}

function nonzeros(vector: Float32Array): number {
  return vector.reduce((count, x) => (x === 0 ? count : count + 1), 0);
}

describe("all-reduce with error feedback", () => {
  it("topk: bit-identical results sent as the contributions, and Σ (vector − residual) over members is exactly the group's sum", async () => {
    const members = nodes(4);
    const compression = { method: "topk" as const, topkDensity: 0.02 };
    // 64 bytes of topk payload: chunks of about 2,000 elements, several per part, all full (a
    // chunk of a few elements goes back in sparse, where that is smaller than the contributions).
    const chunkSizeBytes = 64;
    const fullChunk = chunkElementsFor(chunkSizeBytes, compressorFor("topk", 1, undefined, 0.02));
    const partCounts = [3, 3, 2, 3].map((chunks) => chunks * fullChunk);
    const length = partCounts.reduce((sum, count) => sum + count, 0);
    const vectors = members.map((_, i) => randomVector(10 + i, length));
    const copies = vectors.map((vector) => vector.slice());
    const residuals = members.map(() => new Float32Array(length).fill(Number.NaN));
    const results = await runRound(
      { members, partCounts, vectors, residuals, compression, chunkSizeBytes },
      "feedback-topk",
    );

    const first = results[0]?.vector ?? new Float32Array(0);
    for (const result of results) expect(bytesOf(result.vector).equals(bytesOf(first))).toBe(true);
    expect(vectors).toEqual(copies);
    // Every member's residual is exactly what the codec left out of each chunk, the own part's too.
    const codec = compressorFor("topk", length, undefined, 0.02);
    const chunkElements = chunkElementsFor(chunkSizeBytes, codec);
    const chunks = partRanges(length, partCounts).flatMap((part) =>
      chunkRanges(part.start, part.end, chunkElements),
    );
    expect(chunks.length).toBeGreaterThan(2 * members.length);
    for (const [i, vector] of vectors.entries()) {
      const expected = new Float32Array(length);
      for (const { start, end } of chunks) {
        compressWithFeedback(codec, vector.subarray(start, end), expected.subarray(start, end));
      }
      expect(residuals[i]).toEqual(expected);
    }
    // The group's sum is what the members sent, Σ (vector − residual): the results come back as the
    // contributions themselves (topk-mean), so only the mean's rounding to float32 and each
    // residual's are left (fp16 results would be off by up to 2^-11 relative).
    for (let e = 0; e < length; e++) {
      let sent = 0;
      let residualMass = 0;
      for (const [i, vector] of vectors.entries()) {
        sent += (vector[e] ?? 0) - (residuals[i]?.[e] ?? 0);
        residualMass += Math.abs(residuals[i]?.[e] ?? 0);
      }
      const groupSum = 4 * (first[e] ?? 0);
      const tolerance = 2 ** -20 * Math.abs(groupSum) + 2 ** -40 + 2 ** -23 * residualMass;
      expect(Math.abs(groupSum - sent)).toBeLessThanOrEqual(tolerance);
    }
    // The mean is as sparse as the union of four 2 % contributions.
    expect(nonzeros(first)).toBeGreaterThan(0.02 * length);
    expect(nonzeros(first)).toBeLessThanOrEqual(
      4 * chunks.reduce((sum, c) => sum + Math.ceil(0.02 * (c.end - c.start)), 0),
    );
    // Results travel sparse: each member reads back far less than float32 would take.
    for (const result of results) expect(result.bytesReceived).toBeLessThan(length);
  });

  it("with a lossless codec the residual is zero and the result has the bits of a round without it", async () => {
    const members = nodes(3);
    const length = 3000;
    const vectors = members.map((_, i) => randomVector(30 + i, length));
    const round = {
      members,
      partCounts: [1000, 1200, 800],
      vectors,
      compression: { method: "none" as const },
      chunkSizeBytes: 1024,
    };
    const residuals = members.map(() => new Float32Array(length).fill(7));
    const [withFeedback] = await runRound({ ...round, residuals }, "lossless-feedback");
    const [without] = await runRound({ ...round, residuals: [] }, "lossless-plain");
    expect(bytesOf(withFeedback?.vector ?? new Float32Array(0))).toEqual(
      bytesOf(without?.vector ?? new Float32Array(1)),
    );
    for (const residual of residuals) expect(residual).toEqual(new Float32Array(length));
  });

  it("gives a member that contributes nothing its vector back as the residual", async () => {
    const members: GroupMember[] = [...nodes(2, 3), { peerId: "idle", mode: "node", weight: 0 }];
    const length = 2000;
    const vectors = members.map((_, i) => randomVector(40 + i, length));
    const residuals = members.map(() => new Float32Array(length));
    const results = await runRound(
      {
        members,
        partCounts: [700, 700, 600],
        vectors,
        residuals,
        compression: { method: "topk", topkDensity: 0.05 },
        chunkSizeBytes: 256,
      },
      "idle-feedback",
    );
    expect(residuals[2]).toEqual(vectors[2]);
    expect(results[2]?.totalWeight).toBe(6);
  });

  it("refuses a residual of another length or one that overlaps the vector", async () => {
    const members = nodes(2);
    const [service] = services(members);
    const backing = new Float32Array(200);
    const run = (vector: Float32Array, residual: Float32Array) =>
      service?.run({
        group: { groupId: "bad-residual", members, fractions: [0.5, 0.5] },
        partCounts: [50, 50],
        vector,
        weight: 1,
        compression: { method: "topk" },
        chunkSizeBytes: 1024,
        timeoutMs: 1000,
        residual,
      });
    await expect(run(backing.subarray(0, 100), new Float32Array(99))).rejects.toMatchObject({
      code: "ALLREDUCE_FAILED",
      message: expect.stringContaining("residual has 99 elements") as unknown,
    });
    await expect(run(backing.subarray(0, 100), backing.subarray(99, 199))).rejects.toMatchObject({
      code: "ALLREDUCE_FAILED",
      message: expect.stringContaining("overlaps") as unknown,
    });
  });
});

describe("Averager with error feedback", () => {
  it("keeps the residual in the first Moshpit round, sends later rounds sparse, and sums their bytes", async () => {
    const config = parseExperimentConfig({
      averaging: { loadBalancing: false, maxGroupSize: 2 },
      compression: { method: "topk", topkDensity: 0.05 },
    });
    const members: FormedGroup["members"] = ["a", "b"].map((peerId) => ({
      peerId,
      mode: "node",
      weight: 1,
      uploadBytesPerSecond: 1e6,
      downloadBytesPerSecond: 1e6,
    }));
    const runs: AllReduceRunOptions[] = [];
    const averager = new Averager({
      self: "a",
      mode: () => "node",
      matchmaking: {
        form: () => Promise.resolve({ groupId: `g${runs.length}`, leader: "a", fractions: [], members }),
      } as unknown as Matchmaking,
      allreduce: {
        run: (options: AllReduceRunOptions): Promise<AllReduceResult> => {
          runs.push(options);
          options.residual?.fill(0.5);
          return Promise.resolve({
            vector: options.vector.slice(),
            totalWeight: 2 * options.weight,
            excluded: [],
            exclusions: [],
            bytesSent: 100 + runs.length,
            bytesReceived: 200 + runs.length,
            bytesAggregated: 0,
            largestWindow: 1,
          });
        },
      } as unknown as AllReduceService,
      averaging: config.averaging,
      compression: config.compression,
      link: {
        current: () => ({ uploadBytesPerSecond: 1e6, downloadBytesPerSecond: 1e6 }),
        observed: () => undefined,
      },
      swarmSize: () => 4, // groups of 2: two rounds
      roundMembers: () => ["b", "c", "d"],
      logger: silentLogger,
    });
    const residual = new Float32Array(10);
    const outcome = await averager.average(3, new Float32Array(10).fill(1), 1, undefined, { residual });
    expect(runs.map((run) => run.compression)).toEqual([
      { method: "topk", adaptiveThreshold: 65_536, topkDensity: 0.05 },
      { method: "sparse", adaptiveThreshold: 65_536, topkDensity: 0.05 },
    ]);
    expect(runs[0]?.residual).toBe(residual);
    expect(runs[1]?.residual).toBeUndefined();
    expect(residual).toEqual(new Float32Array(10).fill(0.5));
    expect(outcome).toMatchObject({
      rounds: 2,
      totalWeight: 4,
      bytesSent: 101 + 102,
      bytesReceived: 201 + 202,
    });

    // Alone in the swarm, everything is applied: nothing is left over.
    const alone = new Averager({
      self: "a",
      mode: () => "node",
      matchmaking: {} as unknown as Matchmaking,
      allreduce: {} as unknown as AllReduceService,
      averaging: config.averaging,
      compression: config.compression,
      link: {
        current: () => ({ uploadBytesPerSecond: 1, downloadBytesPerSecond: 1 }),
        observed: () => undefined,
      },
      swarmSize: () => 1,
      roundMembers: () => [],
      logger: silentLogger,
    });
    const soleOutcome = await alone.average(1, new Float32Array(10).fill(1), 1, undefined, { residual });
    expect(residual).toEqual(new Float32Array(10));
    expect(soleOutcome).toMatchObject({ soleTrainer: true, bytesSent: 0, bytesReceived: 0 });
  });

  it("does not step alone while it may not yet have heard of the trainers starting with it", async () => {
    const config = parseExperimentConfig({});
    let allowed = false;
    const alone = new Averager({
      self: "a",
      mode: () => "node",
      matchmaking: {} as unknown as Matchmaking,
      allreduce: {} as unknown as AllReduceService,
      averaging: config.averaging,
      compression: config.compression,
      link: {
        current: () => ({ uploadBytesPerSecond: 1, downloadBytesPerSecond: 1 }),
        observed: () => undefined,
      },
      swarmSize: () => 1,
      aloneAllowed: () => allowed,
      roundMembers: () => [],
      logger: silentLogger,
    });
    await expect(alone.average(1, new Float32Array(4).fill(1), 1)).rejects.toMatchObject({
      code: "NO_GROUP",
    });
    allowed = true;
    expect(await alone.average(1, new Float32Array(4).fill(1), 1)).toMatchObject({ soleTrainer: true });
  });
});
