import { parseExperimentConfig } from "@barnraise/protocol";
import { describe, expect, it } from "vitest";
import { Averager, type ObservedContribution } from "../../src/averaging/averager.ts";
import {
  AllReduceService,
  type AllReduceResult,
  type AllReduceRunOptions,
} from "../../src/averaging/butterfly-allreduce.ts";
import type { FormedGroup, Matchmaking } from "../../src/averaging/matchmaking.ts";
import type { GroupMember } from "../../src/averaging/partition.ts";
import type { ChunkContribution } from "../../src/averaging/reducer-session.ts";
import { at } from "../support/at.ts";
import { MemoryRpcNetwork } from "../support/memory-rpc.ts";
import { seededRandom } from "../support/seeded-random.ts";
import { silentLogger } from "../support/swarm-fixtures.ts";

/**
 * The reducer's contribution hook (what a validator samples): each reducer is told exactly what
 * every other sender streamed for its part, chunk by chunk, before it is aggregated; the averager
 * passes it on with the round's epoch, for the first Moshpit round only.
 */

const LENGTH = 3000;
const MEMBERS: GroupMember[] = [
  { peerId: "t0", mode: "node", weight: 3 },
  { peerId: "t1", mode: "node", weight: 5 },
  { peerId: "t2", mode: "node", weight: 2 },
  { peerId: "aux", mode: "aux", weight: 0 },
];
/** The aux reduces the last 1,200 elements; 256-element chunks split its part into five. */
const PART_COUNTS = [600, 600, 600, 1200];

function vectors(): Map<string, Float32Array> {
  const random = seededRandom(7);
  return new Map(
    MEMBERS.map((member) => [member.peerId, Float32Array.from({ length: LENGTH }, () => random() * 2 - 1)]),
  );
}

/** Each sender's chunks put back together: offset → values, per sender. */
function assemble(chunks: readonly ChunkContribution[]): Map<string, Float32Array> {
  const bySender = new Map<string, Float32Array>();
  for (const chunk of chunks) {
    const { part } = chunk;
    let values = bySender.get(chunk.peerId);
    if (values === undefined) {
      values = new Float32Array(part.end - part.start).fill(Number.NaN);
      bySender.set(chunk.peerId, values);
    }
    values.set(chunk.values, chunk.range.start - part.start);
  }
  return bySender;
}

describe("contribution observer", () => {
  it("tells each reducer exactly the other senders' values for its part, with their weights, before the round ends", async () => {
    const network = new MemoryRpcNetwork();
    const inputs = vectors();
    const seen = new Map<string, ChunkContribution[]>(MEMBERS.map((member) => [member.peerId, []]));
    const group = {
      groupId: "observed",
      members: MEMBERS,
      fractions: PART_COUNTS.map((count) => count / LENGTH),
    };
    const services = MEMBERS.map((member) => {
      const service = new AllReduceService({
        rpc: network.add(member.peerId, member.mode === "aux" ? "aux" : "trainer"),
      });
      service.start();
      return service;
    });
    const results = await Promise.all(
      MEMBERS.map((member, k) =>
        at(services, k).run({
          group,
          partCounts: PART_COUNTS,
          vector: inputs.get(member.peerId) ?? new Float32Array(),
          weight: member.weight,
          compression: { method: "none" },
          chunkSizeBytes: 1024,
          timeoutMs: 20_000,
          onContribution: (contribution) => {
            // Copied: the test checks every chunk after the round, the reducer has let go of them by then.
            seen.get(member.peerId)?.push({ ...contribution, values: contribution.values.slice() });
          },
        }),
      ),
    );
    for (const service of services) service.stop();
    expect(results.every((result: AllReduceResult) => result.excluded.length === 0)).toBe(true);

    let start = 0;
    for (const [k, member] of MEMBERS.entries()) {
      const part = { start, end: start + at(PART_COUNTS, k) };
      start = part.end;
      const chunks = seen.get(member.peerId) ?? [];
      expect(chunks.every((chunk) => chunk.part.start === part.start && chunk.part.end === part.end)).toBe(
        true,
      );
      // Every other sender with weight, none of the aux (it sends nothing) nor the reducer itself.
      const senders = MEMBERS.filter((other) => other.peerId !== member.peerId && other.weight > 0);
      const assembled = assemble(chunks);
      expect([...assembled.keys()].sort()).toEqual(senders.map((sender) => sender.peerId).sort());
      for (const sender of senders) {
        const expected = (inputs.get(sender.peerId) ?? new Float32Array()).subarray(part.start, part.end);
        expect(assembled.get(sender.peerId)).toEqual(expected);
        const weights = new Set(
          chunks.filter((chunk) => chunk.peerId === sender.peerId).map((c) => c.weight),
        );
        expect([...weights]).toEqual([sender.weight]);
      }
      // Five chunks of the aux's 1,200 elements per sender, in order.
      if (member.peerId === "aux") {
        const ofT0 = chunks.filter((chunk) => chunk.peerId === "t0").map((chunk) => chunk.range.start);
        expect(ofT0).toEqual([1800, 2056, 2312, 2568, 2824]);
      }
    }
  });
});

/** An averager whose matchmaking forms `group` and whose all-reduce is `run`, for `dimensions` rounds. */
function fakeAverager(run: (options: AllReduceRunOptions) => void, members: readonly string[]): Averager {
  const config = parseExperimentConfig({ averaging: { loadBalancing: false, maxGroupSize: 2 } });
  let formed = 0;
  return new Averager({
    self: "a",
    mode: () => "node",
    matchmaking: {
      form: (): Promise<FormedGroup> =>
        Promise.resolve({
          groupId: `g${formed++}`,
          leader: "a",
          fractions: [],
          members: [
            { peerId: "a", mode: "node", weight: 1, uploadBytesPerSecond: 1e6, downloadBytesPerSecond: 1e6 },
            { peerId: "b", mode: "node", weight: 1, uploadBytesPerSecond: 1e6, downloadBytesPerSecond: 1e6 },
          ],
        }),
    } as unknown as Matchmaking,
    allreduce: {
      run: (options: AllReduceRunOptions): Promise<AllReduceResult> => {
        run(options);
        return Promise.resolve({
          vector: options.vector,
          totalWeight: 2,
          excluded: [],
          exclusions: [],
          bytesSent: 0,
          bytesReceived: 0,
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
    swarmSize: () => members.length,
    roundMembers: () => members,
    logger: silentLogger,
  });
}

const chunk = (values: number[]): ChunkContribution => ({
  index: 1,
  peerId: "b",
  weight: 1,
  part: { start: 2, end: 6 },
  range: { start: 4, end: 4 + values.length },
  values: Float32Array.from(values),
});

describe("Averager.observeContributions", () => {
  it("passes the reducer's chunks on with the epoch and group of the round, from the first Moshpit round only", async () => {
    const hooks: (AllReduceRunOptions["onContribution"] | undefined)[] = [];
    // Four trainers in groups of two: a 2×2 grid, two rounds.
    const averager = fakeAverager(
      (options) => {
        hooks.push(options.onContribution);
      },
      ["a", "b", "c", "d"],
    );
    const observed: ObservedContribution[] = [];
    const stop = averager.observeContributions((contribution) => observed.push(contribution));
    await averager.average(9, new Float32Array(8), 1);
    expect(hooks).toHaveLength(2);
    expect(hooks[1]).toBeUndefined();
    hooks[0]?.(chunk([1, 2]));
    expect(observed).toEqual([
      {
        epoch: 9,
        groupId: "g0",
        peerId: "b",
        weight: 1,
        part: { start: 2, end: 6 },
        start: 4,
        values: Float32Array.from([1, 2]),
      },
    ]);

    // Without listeners the all-reduce gets no hook: the reducer calls nothing.
    stop();
    await averager.average(10, new Float32Array(8), 1);
    expect(hooks.slice(2)).toEqual([undefined, undefined]);
  });

  it("logs and ignores a listener that throws, and still tells the others", async () => {
    let hook: AllReduceRunOptions["onContribution"];
    const averager = fakeAverager(
      (options) => {
        hook ??= options.onContribution;
      },
      ["a", "b"],
    );
    const observed: number[] = [];
    averager.observeContributions(() => {
      throw new Error("broken listener");
    });
    averager.observeContributions((contribution) => observed.push(contribution.epoch));
    await averager.average(3, new Float32Array(8), 1);
    expect(() => hook?.(chunk([5]))).not.toThrow();
    expect(observed).toEqual([3]);
  });
});
