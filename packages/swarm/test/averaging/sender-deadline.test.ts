import { describe, expect, it } from "vitest";
import { senderDeadlineMs } from "../../src/averaging/sender-deadline.ts";

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
