import { describe, expect, it } from "vitest";
import {
  gatheringDeadlineMs,
  GATHERING_HISTORY_MIN,
  ROUND_MAX_MS,
  roundDeadlineMs,
  senderDeadlineMs,
} from "../../src/averaging/deadlines.ts";

const base = { chunkBytes: 8 << 10, roundTimeoutMs: 60_000 };

describe("senderDeadlineMs", () => {
  it("drops a silent sender within seconds on fast links, not at half the round", () => {
    // 4 peers on 10 Mbit/s: a chunk leaves in 20 ms.
    expect(senderDeadlineMs({ ...base, streams: 3, slowestUploadBytesPerSecond: 1.25e6 })).toBe(5_000);
  });

  it("keeps a slow sender whose link fell to a tenth of what it announced", () => {
    // 24 peers on 2 Mbit/s: a chunk takes 0.75 s to leave; ten times slower is 7.5 s per chunk.
    const deadline = senderDeadlineMs({ ...base, streams: 23, slowestUploadBytesPerSecond: 250e3 });
    expect(deadline).toBeGreaterThan(7_500);
    expect(deadline).toBeLessThanOrEqual(30_000);
  });

  it("never waits past half the round, and falls back to it without a usable rate", () => {
    expect(senderDeadlineMs({ ...base, streams: 63, slowestUploadBytesPerSecond: 10e3 })).toBe(30_000);
    expect(senderDeadlineMs({ ...base, streams: 3, slowestUploadBytesPerSecond: 0 })).toBe(30_000);
    expect(senderDeadlineMs({ ...base, streams: 3, slowestUploadBytesPerSecond: Number.NaN })).toBe(30_000);
    expect(
      senderDeadlineMs({ ...base, roundTimeoutMs: 8_000, streams: 3, slowestUploadBytesPerSecond: 1e9 }),
    ).toBe(4_000);
  });
});

describe("roundDeadlineMs", () => {
  const floorMs = 60_000;

  it("gives a small round the config's time and a large one four times the model's", () => {
    expect(roundDeadlineMs({ predictedSeconds: 2, recentRatios: [], floorMs })).toBe(floorMs);
    // 400 MB over 10 Mbit/s links: about 10 minutes by the model.
    expect(roundDeadlineMs({ predictedSeconds: 600, recentRatios: [], floorMs })).toBe(5_000 + 4 * 600_000);
  });

  it("gives twice the slowest recent round's ratio when rounds have run slower than the model", () => {
    expect(roundDeadlineMs({ predictedSeconds: 100, recentRatios: [1.2, 3, 2], floorMs })).toBe(
      5_000 + 6 * 100_000,
    );
    // Ratios below the minimum slack change nothing; nonsense ratios are ignored.
    expect(roundDeadlineMs({ predictedSeconds: 100, recentRatios: [0.5, Number.NaN, -1], floorMs })).toBe(
      5_000 + 4 * 100_000,
    );
  });

  it("never gives more than an hour, and the config's time without a usable model", () => {
    expect(roundDeadlineMs({ predictedSeconds: 10_000, recentRatios: [], floorMs })).toBe(ROUND_MAX_MS);
    expect(roundDeadlineMs({ predictedSeconds: Number.NaN, recentRatios: [], floorMs })).toBe(floorMs);
    expect(roundDeadlineMs({ predictedSeconds: Infinity, recentRatios: [], floorMs })).toBe(floorMs);
  });
});

describe("gatheringDeadlineMs", () => {
  const capMs = 15_000;

  it("waits the config's time until it has seen a few gatherings", () => {
    expect(gatheringDeadlineMs({ recentSpreadsMs: [], capMs })).toBe(capMs);
    expect(
      gatheringDeadlineMs({ recentSpreadsMs: Array<number>(GATHERING_HISTORY_MIN - 1).fill(100), capMs }),
    ).toBe(capMs);
  });

  it("waits seconds, not the whole timeout, when members arrive close together", () => {
    expect(gatheringDeadlineMs({ recentSpreadsMs: [100, 300, 200], capMs })).toBe(5_000);
    expect(gatheringDeadlineMs({ recentSpreadsMs: [100, 2_000, 200], capMs })).toBe(2_000 + 3 * 2_000);
  });

  it("keeps waiting the full time for a swarm whose members straggle", () => {
    expect(gatheringDeadlineMs({ recentSpreadsMs: [100, 6_000, 200], capMs })).toBe(capMs);
    expect(gatheringDeadlineMs({ recentSpreadsMs: [Number.NaN, -5, 100, 100, 100], capMs })).toBe(5_000);
  });
});
