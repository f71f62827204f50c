import { parseExperimentConfig } from "@barnraise/protocol";
import { describe, expect, it } from "vitest";
import { Averager } from "../../src/averaging/averager.ts";
import type {
  AllReduceResult,
  AllReduceRunOptions,
  AllReduceService,
} from "../../src/averaging/butterfly-allreduce.ts";
import type { FormedGroup, Matchmaking, MemberOffer } from "../../src/averaging/matchmaking.ts";
import { senderDeadlineMs } from "../../src/averaging/sender-deadline.ts";
import { silentLogger } from "../support/swarm-fixtures.ts";

const MB = 1e6;

/**
 * The averager between matchmaking and the all-reduce, with both faked: what it offers, what it
 * asks of the round, and what it tells the link meter afterwards.
 */
describe("Averager", () => {
  it("offers the link's measured rates, gives the round a sender deadline from the slowest sender, and reports the round's traffic", async () => {
    const config = parseExperimentConfig({ averaging: { loadBalancing: false } });
    const offers: MemberOffer[] = [];
    const group: FormedGroup = {
      groupId: "g1",
      leader: "a",
      fractions: [],
      members: [
        {
          peerId: "a",
          mode: "node",
          weight: 10,
          uploadBytesPerSecond: 2 * MB,
          downloadBytesPerSecond: 5 * MB,
        },
        {
          peerId: "b",
          mode: "node",
          weight: 10,
          uploadBytesPerSecond: 0.25 * MB,
          downloadBytesPerSecond: 1 * MB,
        },
        // An aux sends nothing: its rate does not set the deadline.
        {
          peerId: "c",
          mode: "aux",
          weight: 0,
          uploadBytesPerSecond: 0.01 * MB,
          downloadBytesPerSecond: 1 * MB,
        },
      ],
    };
    const matchmaking = {
      form: (_key: string, offer: MemberOffer) => {
        offers.push(offer);
        return Promise.resolve(group);
      },
    } as unknown as Matchmaking;
    const runs: AllReduceRunOptions[] = [];
    const allreduce = {
      run: (options: AllReduceRunOptions): Promise<AllReduceResult> => {
        runs.push(options);
        now += 2_000; // the round takes 2 s
        return Promise.resolve({
          vector: options.vector.slice(),
          totalWeight: 20,
          excluded: [],
          bytesSent: 3 * MB,
          bytesReceived: 4 * MB,
          bytesAggregated: 0,
          largestWindow: 6,
        });
      },
    } as unknown as AllReduceService;
    const observed: { bytesSent: number; bytesReceived: number; seconds: number }[] = [];
    let now = 1_000;
    const averager = new Averager({
      self: "a",
      mode: () => "node",
      matchmaking,
      allreduce,
      averaging: config.averaging,
      compression: config.compression,
      link: {
        current: () => ({ uploadBytesPerSecond: 2 * MB, downloadBytesPerSecond: 5 * MB }),
        observed: (sample) => observed.push(sample),
      },
      swarmSize: () => 2,
      now: () => now,
      logger: silentLogger,
    });

    await averager.average(7, new Float32Array(300), 10);

    expect(offers).toEqual([
      { mode: "node", weight: 10, uploadBytesPerSecond: 2 * MB, downloadBytesPerSecond: 5 * MB },
    ]);
    const [run] = runs;
    expect(run?.senderTimeoutMs).toBe(
      senderDeadlineMs({
        chunkBytes: config.averaging.chunkSizeBytes,
        streams: 2,
        slowestUploadBytesPerSecond: 0.25 * MB,
        roundTimeoutMs: config.averaging.allreduceTimeoutMs,
      }),
    );
    expect(run?.senderTimeoutMs).toBeLessThan(config.averaging.allreduceTimeoutMs / 2);
    // Each stream's window starts at chunksInFlight and may grow to the config's cap.
    expect(run).toMatchObject({
      chunksInFlight: config.averaging.chunksInFlight,
      maxChunksInFlight: config.averaging.maxChunksInFlight,
      uploadBytesPerSecond: 2 * MB,
    });
    expect(observed).toEqual([{ bytesSent: 3 * MB, bytesReceived: 4 * MB, seconds: 2 }]);
  });
});
