import { parseExperimentConfig } from "@barnraise/protocol";
import { pino } from "pino";
import { describe, expect, it } from "vitest";
import { CenteredClip } from "../../src/averaging/aggregation/centered-clip.ts";
import { weightedMean } from "../../src/averaging/aggregation/weighted-mean.ts";
import { Averager } from "../../src/averaging/averager.ts";
import { SwarmError, SwarmErrorCode } from "../../src/errors.ts";
import type {
  AllReduceResult,
  AllReduceRunOptions,
  AllReduceService,
} from "../../src/averaging/butterfly-allreduce.ts";
import type { FormedGroup, FormedMember, Matchmaking, MemberOffer } from "../../src/averaging/matchmaking.ts";
import { roundDeadlineMs, senderDeadlineMs } from "../../src/averaging/deadlines.ts";
import { predictedAllReduceSeconds, uniformPartFractions } from "../../src/averaging/load-balancing.ts";
import { PrometheusMetrics } from "../../src/node/prometheus-metrics.ts";
import { DEFAULT_LINK_BYTES_PER_SECOND } from "../../src/net/link-meter.ts";
import { silentLogger } from "../support/swarm-fixtures.ts";

const MB = 1e6;

/**
 * The averager between matchmaking and the all-reduce, with both faked: what it offers, what it
 * asks of the round, and what it tells the link meter afterwards.
 */
/** An averager of `members` with matchmaking and the all-reduce faked; `run` sees each round's options. */
function pairAverager(
  members: FormedGroup["members"],
  bytesPerSecond: number,
  run: (options: AllReduceRunOptions) => { excluded: string[] },
  now?: () => number,
): Averager {
  const config = parseExperimentConfig({ averaging: { loadBalancing: false } });
  return new Averager({
    self: "a",
    mode: () => "node",
    matchmaking: {
      form: () => Promise.resolve({ groupId: "g", leader: "a", fractions: [], members }),
    } as unknown as Matchmaking,
    allreduce: {
      run: (options: AllReduceRunOptions): Promise<AllReduceResult> =>
        Promise.resolve({
          vector: options.vector,
          totalWeight: 2,
          excluded: run(options).excluded,
          exclusions: [],
          bytesSent: 0,
          bytesReceived: 0,
          bytesAggregated: 0,
          largestWindow: 2,
        }),
    } as unknown as AllReduceService,
    averaging: config.averaging,
    compression: config.compression,
    link: {
      current: () => ({ uploadBytesPerSecond: bytesPerSecond, downloadBytesPerSecond: bytesPerSecond }),
      observed: () => undefined,
    },
    swarmSize: () => 2,
    roundMembers: () => members.map((member) => member.peerId),
    ...(now === undefined ? {} : { now }),
    logger: silentLogger,
  });
}

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
          exclusions: [],
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
      roundMembers: () => ["b"],
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

  it("gives a round the time the vector needs on the members' measured links, and more after rounds that ran slow", async () => {
    const config = parseExperimentConfig({ averaging: { loadBalancing: false } });
    // Two volunteers on 10 kB/s links averaging 4 MB: the model says about 400 s, far past the
    // config's 60 s, which is only the least a round gets.
    const members = ["a", "b"].map((peerId) => ({
      peerId,
      mode: "node" as const,
      weight: 10,
      uploadBytesPerSecond: 10e3,
      downloadBytesPerSecond: 10e3,
    }));
    const vector = new Float32Array(1_000_000);
    const predicted = predictedAllReduceSeconds(
      members.map((m) => ({ ...m, canReduce: true, sends: true })),
      uniformPartFractions(members.map((m) => ({ ...m, canReduce: true, sends: true }))),
      vector.byteLength,
    );
    expect(predicted).toBeGreaterThan(300);
    let now = 0;
    let roundSeconds = 0;
    let excluded: string[] = [];
    const runs: AllReduceRunOptions[] = [];
    const averager = pairAverager(
      members,
      10e3,
      (options) => {
        runs.push(options);
        now += roundSeconds * 1000;
        return { excluded };
      },
      () => now,
    );
    const floorMs = config.averaging.allreduceTimeoutMs;

    // No history: four times the model.
    roundSeconds = 3 * predicted;
    await averager.average(1, vector, 10);
    expect(runs[0]?.timeoutMs).toBe(
      roundDeadlineMs({ predictedSeconds: predicted, recentRatios: [], floorMs }),
    );
    expect(runs[0]?.timeoutMs).toBeGreaterThan(4 * predicted * 1000);
    // That round took three times the model: the next gets twice that.
    roundSeconds = predicted;
    await averager.average(2, vector, 10);
    expect(runs[1]?.timeoutMs).toBeGreaterThan(6 * predicted * 1000);
    expect(runs[1]?.timeoutMs).toBeLessThan(7 * predicted * 1000);
    // The sender deadline is capped by this round's deadline, not the config's.
    expect(runs[1]?.senderTimeoutMs).toBe(
      senderDeadlineMs({
        chunkBytes: config.averaging.chunkSizeBytes,
        streams: 1,
        slowestUploadBytesPerSecond: 10e3,
        roundTimeoutMs: runs[1]?.timeoutMs ?? 0,
      }),
    );
    // A round that lost a member says nothing about honest rounds: it is not remembered.
    excluded = ["b"];
    roundSeconds = 100 * predicted;
    await averager.average(3, vector, 10);
    excluded = [];
    await averager.average(4, vector, 10);
    expect(runs[3]?.timeoutMs).toBe(runs[2]?.timeoutMs);
  });

  it("does not scale a measured round's deadline by a round predicted on default links", async () => {
    const config = parseExperimentConfig({ averaging: { loadBalancing: false } });
    const offer = (bytesPerSecond: number): FormedMember[] =>
      ["a", "b"].map((peerId) => ({
        peerId,
        mode: "node" as const,
        weight: 10,
        uploadBytesPerSecond: bytesPerSecond,
        downloadBytesPerSecond: bytesPerSecond,
      }));
    // The netns lab: an 80 KB vector, whose first round, predicted on the default links, took 2 s
    // (about 300 times the model); then the members offered measured links of 150 kB/s.
    const members = offer(DEFAULT_LINK_BYTES_PER_SECOND);
    const vector = new Float32Array(20_000);
    let now = 0;
    const runs: AllReduceRunOptions[] = [];
    const averager = pairAverager(
      members,
      DEFAULT_LINK_BYTES_PER_SECOND,
      (options) => {
        runs.push(options);
        now += 2_000;
        return { excluded: [] };
      },
      () => now,
    );
    await averager.average(1, vector, 10);
    members.splice(0, members.length, ...offer(150e3));
    await averager.average(2, vector, 10);

    const measured = members.map((m) => ({ ...m, canReduce: true, sends: true }));
    const predicted = predictedAllReduceSeconds(measured, uniformPartFractions(measured), vector.byteLength);
    expect(runs[1]?.timeoutMs).toBe(
      roundDeadlineMs({
        predictedSeconds: predicted,
        recentRatios: [],
        floorMs: config.averaging.allreduceTimeoutMs,
      }),
    );
    expect(runs[1]?.timeoutMs).toBe(config.averaging.allreduceTimeoutMs);
  });

  it("gives a small vector on fast links the config's round deadline", async () => {
    const config = parseExperimentConfig({});
    const runs: AllReduceRunOptions[] = [];
    const members = ["a", "b"].map((peerId) => ({
      peerId,
      mode: "node" as const,
      weight: 1,
      uploadBytesPerSecond: 12.5e6,
      downloadBytesPerSecond: 12.5e6,
    }));
    const averager = pairAverager(members, 12.5e6, (options) => {
      runs.push(options);
      return { excluded: [] };
    });
    await averager.average(1, new Float32Array(10_000), 1);
    expect(runs[0]?.timeoutMs).toBe(config.averaging.allreduceTimeoutMs);
  });
});

describe("Averager exclusions", () => {
  it("returns each excluded peer with its reason, warns of a non-finite sender and counts it", async () => {
    const config = parseExperimentConfig({
      averaging: { loadBalancing: false, aggregation: "centered-clip", centeredClip: { tau: 3 } },
    });
    const metrics = new PrometheusMetrics();
    const lines: string[] = [];
    const logger = pino({ level: "warn" }, { write: (line: string) => lines.push(line) });
    const runs: AllReduceRunOptions[] = [];
    const exclusions: AllReduceResult["exclusions"] = [
      { peer: "b", reason: "non-finite" },
      { peer: "c", reason: "timeout" },
      { peer: "d", reason: "elsewhere" },
    ];
    const averager = new Averager({
      self: "a",
      mode: () => "node",
      matchmaking: {
        form: () =>
          Promise.resolve({
            groupId: "g",
            leader: "a",
            fractions: [],
            members: ["a", "b", "c", "d"].map((peerId) => ({
              peerId,
              mode: "node",
              weight: 1,
              uploadBytesPerSecond: MB,
              downloadBytesPerSecond: MB,
            })),
          }),
      } as unknown as Matchmaking,
      allreduce: {
        run: (options: AllReduceRunOptions): Promise<AllReduceResult> => {
          runs.push(options);
          return Promise.resolve({
            vector: options.vector.slice(),
            totalWeight: 1,
            excluded: exclusions.map((exclusion) => exclusion.peer),
            exclusions,
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
        current: () => ({ uploadBytesPerSecond: MB, downloadBytesPerSecond: MB }),
        observed: () => undefined,
      },
      swarmSize: () => 4,
      roundMembers: () => ["b", "c", "d"],
      logger,
      metrics,
    });
    const outcome = await averager.average(1, new Float32Array(8), 1);

    // The config's aggregation reaches the round: CenteredClip with tau 3 and 10 iterations, which
    // on points with an outlier gives what such a CenteredClip gives, and not what tau 1 gives.
    const aggregator = runs[0]?.aggregator;
    expect(aggregator).toBeInstanceOf(CenteredClip);
    const points = [0, 1, 2, 3, 100].map((value) => Float32Array.of(value));
    const weights = points.map(() => 1);
    expect(aggregator?.aggregate(points, weights)).toEqual(
      new CenteredClip(3, 10).aggregate(points, weights),
    );
    expect(aggregator?.aggregate(points, weights)).not.toEqual(
      new CenteredClip(1, 10).aggregate(points, weights),
    );
    expect(outcome.exclusions).toEqual(exclusions);
    const warnings = lines.map((line) => JSON.parse(line) as { peer?: string; reason?: string });
    expect(warnings).toEqual([expect.objectContaining({ peer: "b", reason: "non-finite" })]);
    const counted = await metrics.peerExclusions.get();
    expect(
      Object.fromEntries(counted.values.map((sample) => [String(sample.labels.reason), sample.value])),
    ).toEqual({ "non-finite": 1, timeout: 1 });
  });

  it("asks the round for the weighted mean by default", async () => {
    const runs: AllReduceRunOptions[] = [];
    const averager = pairAverager(
      [
        { peerId: "a", mode: "node", weight: 1, uploadBytesPerSecond: MB, downloadBytesPerSecond: MB },
        { peerId: "b", mode: "node", weight: 1, uploadBytesPerSecond: MB, downloadBytesPerSecond: MB },
      ] as FormedGroup["members"],
      MB,
      (options) => {
        runs.push(options);
        return { excluded: [] };
      },
    );
    await averager.average(1, new Float32Array(8), 1);
    expect(runs[0]?.aggregator).toBe(weightedMean);
  });

  it("a client whose group holds no other trainer while others train at its step fails the round instead of stepping apart", async () => {
    const config = parseExperimentConfig({ averaging: { loadBalancing: false } });
    const member = (peerId: string, mode: FormedMember["mode"], weight: number): FormedMember => ({
      peerId,
      mode,
      weight,
      uploadBytesPerSecond: MB,
      downloadBytesPerSecond: MB,
    });
    let members: FormedMember[] = [member("tab", "client", 4), member("aux", "aux", 0)];
    let mode: "client" | "node" = "client";
    let others = ["tab", "p1", "p2"];
    const runs: AllReduceRunOptions[] = [];
    const averager = new Averager({
      self: "tab",
      mode: () => mode,
      matchmaking: {
        form: () => Promise.resolve({ groupId: "g", leader: "aux", fractions: [], members }),
      } as unknown as Matchmaking,
      allreduce: {
        run: (options: AllReduceRunOptions): Promise<AllReduceResult> => {
          runs.push(options);
          return Promise.resolve({
            vector: options.vector.slice(),
            totalWeight: members.reduce((sum, { weight }) => sum + weight, 0),
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
        current: () => ({ uploadBytesPerSecond: MB, downloadBytesPerSecond: MB }),
        observed: () => undefined,
      },
      swarmSize: () => 3,
      roundMembers: () => others,
      logger: silentLogger,
    });
    const average = () => averager.average(7, new Float32Array([1, 2]), 4);

    // The CLI peers gathered elsewhere: the tab's group is itself and the aux.
    await expect(average()).rejects.toThrow(/group for step 7 has no other trainer while 2 train at it/);
    expect(runs).toHaveLength(0);
    // With one of them in the group, it averages.
    members = [member("tab", "client", 4), member("aux", "aux", 0), member("p1", "node", 4)];
    await expect(average()).resolves.toMatchObject({ groupSize: 3, totalWeight: 8 });
    // Nobody else trains at the step: the aux's group is the round.
    members = [member("tab", "client", 4), member("aux", "aux", 0)];
    others = ["tab"];
    await expect(average()).resolves.toMatchObject({ groupSize: 2, totalWeight: 4 });
    // A full node apart from the others steps (it takes the majority's state over afterwards).
    others = ["tab", "p1"];
    mode = "node";
    await expect(average()).resolves.toMatchObject({ groupSize: 2 });
    expect(runs).toHaveLength(3);
  });

  it("steps alone when nobody came and the others it expected are gone meanwhile (paused or left), and fails while they are not", async () => {
    const config = parseExperimentConfig({ averaging: { loadBalancing: false } });
    let swarmSize = 2;
    /** The swarm's size once the gathering is over: the trainer it expected paused meanwhile, or not. */
    let sizeAfterGathering = 2;
    let aloneAllowed = true;
    const averager = new Averager({
      self: "a",
      mode: () => "node",
      matchmaking: {
        form: () => {
          swarmSize = sizeAfterGathering;
          return Promise.reject(new SwarmError(SwarmErrorCode.NO_GROUP, "no group formed for k"));
        },
      } as unknown as Matchmaking,
      allreduce: {
        run: () => Promise.reject(new Error("no round without a group")),
      } as unknown as AllReduceService,
      averaging: config.averaging,
      compression: config.compression,
      link: {
        current: () => ({ uploadBytesPerSecond: MB, downloadBytesPerSecond: MB }),
        observed: () => undefined,
      },
      swarmSize: () => swarmSize,
      aloneAllowed: () => aloneAllowed,
      roundMembers: () => ["a", "b"],
      logger: silentLogger,
    });
    const vector = new Float32Array([1, 2, 3]);
    const residual = new Float32Array([0.5, 0.5, 0.5]);
    const average = () => {
      swarmSize = 2;
      return averager.average(1, vector, 4, undefined, { residual });
    };
    // The other trainer is still there: nobody came, and the round fails (to be tried again).
    await expect(average()).rejects.toMatchObject({ code: SwarmErrorCode.NO_GROUP });
    // It paused while this peer gathered: alone now, it steps alone, when a lone step is allowed.
    sizeAfterGathering = 1;
    aloneAllowed = false;
    await expect(average()).rejects.toMatchObject({ code: SwarmErrorCode.NO_GROUP });
    aloneAllowed = true;
    const outcome = await average();
    expect(outcome).toMatchObject({ groupSize: 1, totalWeight: 4, soleTrainer: true, rounds: 0 });
    expect([...outcome.vector]).toEqual([1, 2, 3]);
    expect([...residual]).toEqual([0, 0, 0]);
  });
});
