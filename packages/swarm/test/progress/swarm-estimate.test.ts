import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { ProgressRecord } from "../../src/progress/progress-messages.ts";
import { estimateSwarm, type ReceivedProgress } from "../../src/progress/swarm-estimate.ts";

const NOW = 10_000_000;
const TTL = 5_000;

function record(overrides: Partial<ProgressRecord> = {}): ProgressRecord {
  return {
    epoch: 1,
    samplesAccumulated: 0,
    samplesPerSecond: 0,
    time: NOW,
    mode: "node",
    lossSum: 0,
    minibatches: 0,
    step: overrides.epoch ?? 1,
    bytesAggregated: 0,
    ...overrides,
  };
}

function peer(peerId: string, overrides: Partial<ProgressRecord>, receivedAt = NOW): ReceivedProgress {
  return { peerId, record: record(overrides), receivedAt };
}

function estimate(
  peers: ReceivedProgress[],
  local: ReceivedProgress | null = null,
  targetBatchSize = 1000,
  epoch?: number,
) {
  return estimateSwarm({
    peers,
    local,
    now: NOW,
    ttlMs: TTL,
    targetBatchSize,
    ...(epoch === undefined ? {} : { epoch }),
  });
}

describe("estimateSwarm", () => {
  it("reports nothing alive and an infinite ETA for an empty swarm", () => {
    expect(estimate([])).toMatchObject({
      epoch: 0,
      samplesAccumulated: 0,
      alivePeers: 0,
      etaSeconds: Infinity,
      readyToAverage: false,
      peers: [],
    });
  });

  it("sums the samples of the peers at the highest epoch only", () => {
    const result = estimate([
      peer("a", { epoch: 4, samplesAccumulated: 100 }),
      peer("b", { epoch: 4, samplesAccumulated: 50 }),
      peer("c", { epoch: 3, samplesAccumulated: 700 }),
    ]);
    expect(result.epoch).toBe(4);
    expect(result.samplesAccumulated).toBe(150);
    expect(result.alivePeers).toBe(3);
    expect(result.peers.map((row) => [row.peerId, row.atGlobalEpoch])).toEqual([
      ["a", true],
      ["b", true],
      ["c", false],
    ]);
  });

  it("leaves a paused trainer out, itself too: it brings nothing until it trains again", () => {
    const paused = peer("b", { samplesAccumulated: 600, samplesPerSecond: 40, paused: ["busy"] });
    const result = estimate([peer("a", { samplesAccumulated: 500, samplesPerSecond: 10 }), paused]);
    expect(result).toMatchObject({
      alivePeers: 1,
      peersAtEpoch: 1,
      samplesAccumulated: 500,
      samplesPerSecond: 10,
    });
    expect(result.readyToAverage).toBe(false);
    expect(result.peers.map((row) => row.peerId)).toEqual(["a"]);
    // Its own estimate, paused, counts the others only.
    expect(estimate([peer("a", { samplesAccumulated: 500 })], paused).alivePeers).toBe(1);
  });

  it("extrapolates each record by its samples/s times its age", () => {
    const result = estimate([
      peer("a", { samplesAccumulated: 100, samplesPerSecond: 10, time: NOW - 2_000 }, NOW - 1_500),
      peer("b", { samplesAccumulated: 50, samplesPerSecond: 4, time: NOW - 500 }, NOW - 500),
    ]);
    // a: 100 + 10 × 2 s, b: 50 + 4 × 0.5 s
    expect(result.samplesAccumulated).toBeCloseTo(172);
    expect(result.peers.find((row) => row.peerId === "a")?.extrapolatedSamples).toBeCloseTo(20);
    // ETA: (1000 − 172) / 14 samples/s
    expect(result.etaSeconds).toBeCloseTo((1000 - 172) / 14);
  });

  it("does not extrapolate a trainer averaging the epoch it reports: its samples went into the round", () => {
    const averaging = { samplesAccumulated: 100, samplesPerSecond: 10, time: NOW - 2_000 };
    const result = estimate([
      peer("a", { ...averaging, averagingEpoch: 1 }, NOW - 1_500),
      // a delayed round of the epoch before runs in the background: epoch 1 still grows
      peer("b", { ...averaging, averagingEpoch: 0 }, NOW - 1_500),
    ]);
    expect(result.samplesAccumulated).toBeCloseTo(100 + 120);
    expect(result.peers.map((row) => row.extrapolatedSamples)).toEqual([0, 20]);
    // its throughput still counts for the ETA: it trains on once the round is over
    expect(result.samplesPerSecond).toBe(20);
  });

  it("clamps the extrapolation of a skewed sender clock to [receive age, ttl]", () => {
    const behind = estimate([peer("a", { samplesPerSecond: 10, time: NOW - 3_600_000 }, NOW - 1_000)]);
    expect(behind.samplesAccumulated).toBeCloseTo((10 * TTL) / 1000);
    const ahead = estimate([peer("a", { samplesPerSecond: 10, time: NOW + 3_600_000 }, NOW - 1_000)]);
    expect(ahead.samplesAccumulated).toBeCloseTo(10);
  });

  it("never extrapolates past the target, but keeps reported samples beyond it", () => {
    const extrapolated = estimate([
      peer("a", { samplesAccumulated: 900, samplesPerSecond: 1000, time: NOW - 4_000 }),
    ]);
    expect(extrapolated.samplesAccumulated).toBe(1000);
    expect(extrapolated.readyToAverage).toBe(true);
    expect(extrapolated.etaSeconds).toBe(0);
    const reported = estimate([peer("a", { samplesAccumulated: 1200, samplesPerSecond: 1000 })]);
    expect(reported.samplesAccumulated).toBe(1200);
  });

  it("ignores records received longer ago than the ttl, whatever their epoch", () => {
    const result = estimate([
      peer("a", { epoch: 2, samplesAccumulated: 10 }),
      peer("old", { epoch: 9, samplesAccumulated: 500 }, NOW - TTL - 1),
    ]);
    expect(result.epoch).toBe(2);
    expect(result.alivePeers).toBe(1);
    expect(result.samplesAccumulated).toBe(10);
  });

  it("always counts the local record, and counts lagging peers' throughput in the ETA", () => {
    const local = peer("me", { epoch: 5, samplesAccumulated: 100, samplesPerSecond: 5 }, NOW - 60_000);
    const result = estimate(
      [peer("lagging", { epoch: 4, samplesAccumulated: 300, samplesPerSecond: 15 })],
      local,
    );
    expect(result.alivePeers).toBe(2);
    expect(result.epoch).toBe(5);
    // the local record is a minute old: extrapolation is clamped to the ttl
    expect(result.samplesAccumulated).toBeCloseTo(100 + (5 * TTL) / 1000);
    expect(result.samplesPerSecond).toBe(20);
    expect(result.peers.find((row) => row.self)?.peerId).toBe("me");
  });

  it("counts no aux record toward the epoch, the samples or the alive trainers", () => {
    // The stall: every trainer left, the aux still reported the last epoch it helped.
    const lone = estimate(
      [peer("aux", { epoch: 324, mode: "aux", samplesAccumulated: 500, samplesPerSecond: 3 })],
      peer("me", { epoch: 0, samplesAccumulated: 10, samplesPerSecond: 2 }),
    );
    expect(lone).toMatchObject({ epoch: 0, samplesAccumulated: 10, alivePeers: 1, peersAtEpoch: 1 });
    expect(lone.samplesPerSecond).toBe(2);
    expect(lone.peers.map((row) => row.peerId)).toEqual(["me"]);

    const mixed = estimate([
      peer("a", { epoch: 7, samplesAccumulated: 40, mode: "client" }),
      peer("aux", { epoch: 7, averagingEpoch: 7, mode: "aux", samplesAccumulated: 900 }),
      peer("aux2", { epoch: 9, stateEpoch: 9, mode: "aux" }),
    ]);
    expect(mixed).toMatchObject({ epoch: 7, samplesAccumulated: 40, alivePeers: 1 });

    // An aux node's own estimate is about the trainers only.
    const fromAux = estimate(
      [peer("a", { epoch: 3, samplesAccumulated: 30 })],
      peer("me", { epoch: 8, mode: "aux", stateEpoch: 8 }),
    );
    expect(fromAux).toMatchObject({ epoch: 3, samplesAccumulated: 30, alivePeers: 1 });
    expect(estimate([], peer("me", { epoch: 8, mode: "aux" }))).toMatchObject({ epoch: 0, alivePeers: 0 });
  });

  it("ignores records of another run generation than the local one", () => {
    const peers = [
      peer("old", { epoch: 90, samplesAccumulated: 500 }),
      peer("same", { epoch: 12, samplesAccumulated: 20, generation: 2 }),
      peer("newer", { epoch: 3, samplesAccumulated: 7, generation: 3 }),
    ];
    const local = peer("me", { epoch: 12, samplesAccumulated: 5, generation: 2 });
    expect(estimate(peers, local)).toMatchObject({
      epoch: 12,
      generation: 2,
      samplesAccumulated: 25,
      alivePeers: 2,
    });
    // No local record yet, or one without a generation: generation 0.
    expect(estimate(peers)).toMatchObject({ epoch: 90, generation: 0, alivePeers: 1 });
    expect(estimate(peers, peer("me", { epoch: 0 }))).toMatchObject({ epoch: 90, alivePeers: 2 });
  });

  it("estimates an epoch asked for as if it were the swarm's", () => {
    const peers = [
      peer("ahead", { epoch: 50, samplesAccumulated: 300, samplesPerSecond: 100 }),
      peer("peer", { epoch: 4, samplesAccumulated: 30, samplesPerSecond: 5 }),
      peer("aux", { epoch: 4, averagingEpoch: 4, mode: "aux" }),
    ];
    const local = peer("me", { epoch: 4, samplesAccumulated: 20, samplesPerSecond: 5 });
    const atFour = estimate(peers, local, 100, 4);
    expect(atFour).toMatchObject({ epoch: 4, samplesAccumulated: 50, peersAtEpoch: 2, alivePeers: 3 });
    // Only the peers at the epoch bring samples to it.
    expect(atFour.samplesPerSecond).toBe(10);
    expect(atFour.etaSeconds).toBeCloseTo(5);
    expect(estimate(peers, local, 100, 7)).toMatchObject({
      epoch: 7,
      samplesAccumulated: 0,
      peersAtEpoch: 0,
    });
    expect(estimate(peers, local, 100)).toMatchObject({ epoch: 50, peersAtEpoch: 1 });
  });

  it("keeps its invariants for any set of records", () => {
    const recordArbitrary = fc.record({
      epoch: fc.integer({ min: 0, max: 3 }),
      mode: fc.constantFrom("node" as const, "client" as const, "aux" as const),
      generation: fc.constantFrom(undefined, 0, 1),
      samplesAccumulated: fc.integer({ min: 0, max: 2000 }),
      samplesPerSecond: fc.double({ min: 0, max: 500, noNaN: true }),
      timeOffset: fc.integer({ min: -100_000, max: 100_000 }),
      age: fc.integer({ min: -1_000, max: 2 * TTL }),
    });
    fc.assert(
      fc.property(
        fc.array(recordArbitrary, { maxLength: 12 }),
        fc.integer({ min: 1, max: 5000 }),
        (rows, target) => {
          const peers = rows.map((row, i) =>
            peer(
              `p${i}`,
              {
                epoch: row.epoch,
                mode: row.mode,
                samplesAccumulated: row.samplesAccumulated,
                samplesPerSecond: row.samplesPerSecond,
                time: NOW + row.timeOffset,
                ...(row.generation === undefined ? {} : { generation: row.generation }),
              },
              NOW - row.age,
            ),
          );
          const result = estimate(peers, null, target);
          const alive = peers.filter(
            (p) => NOW - p.receivedAt <= TTL && p.record.mode !== "aux" && (p.record.generation ?? 0) === 0,
          );
          expect(result.alivePeers).toBe(alive.length);
          expect(result.epoch).toBe(Math.max(0, ...alive.map((p) => p.record.epoch)));
          const reported = alive
            .filter((p) => p.record.epoch === result.epoch)
            .reduce((sum, p) => sum + p.record.samplesAccumulated, 0);
          expect(result.samplesAccumulated).toBeGreaterThanOrEqual(reported);
          expect(result.samplesAccumulated).toBeLessThanOrEqual(Math.max(reported, target));
          expect(result.etaSeconds).toBeGreaterThanOrEqual(0);
          expect(result.readyToAverage).toBe(result.samplesAccumulated >= target);
          for (const row of result.peers) expect(row.extrapolatedSamples).toBeGreaterThanOrEqual(0);
        },
      ),
      { seed: 7, numRuns: 300 },
    );
  });
});
