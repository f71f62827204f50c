import { describe, expect, it } from "vitest";
import { RoundTripFloor, WindowControl } from "../../src/averaging/part-exchange.ts";

const CHUNK = 8192;
/** 10 Mbit/s of upload shared by 3 streams, in bytes per second. */
const SHARE = 1_250_000 / 3;

describe("WindowControl", () => {
  it("holds what the stream sends in a round trip plus 0.2 s, in chunks", () => {
    const window = new WindowControl({ least: 2, most: 256, streamBytesPerSecond: SHARE, chunkBytes: CHUNK });
    expect(window.size).toBe(2);
    window.roundTrip(100); // 416.7 B/ms × 300 ms = 15.3 chunks
    expect(window.size).toBe(16);
    window.roundTrip(0.5); // 416.7 B/ms × 200.5 ms = 10.2 chunks
    expect(window.size).toBe(11);
  });

  it("keeps a slow stream's window small, so the results behind it are not held up, but never below the least", () => {
    // 2 Mbit/s shared by 16 streams: 15.6 kB/s, 3.1 kB in 0.2 s, one chunk.
    const slow = new WindowControl({
      least: 1,
      most: 256,
      streamBytesPerSecond: 250e3 / 16,
      chunkBytes: CHUNK,
    });
    slow.roundTrip(1);
    expect(slow.size).toBe(1);
    const least = new WindowControl({
      least: 6,
      most: 256,
      streamBytesPerSecond: 250e3 / 16,
      chunkBytes: CHUNK,
    });
    least.roundTrip(1);
    expect(least.size).toBe(6);
  });

  it("stays at the starting window without a measured rate, or when the window is fixed", () => {
    const unmeasured = new WindowControl({ least: 6, most: 256, streamBytesPerSecond: 0, chunkBytes: CHUNK });
    unmeasured.roundTrip(100);
    expect(unmeasured.size).toBe(6);
    const fixed = new WindowControl({ least: 6, most: 6, streamBytesPerSecond: SHARE, chunkBytes: CHUNK });
    fixed.roundTrip(100);
    expect(fixed.size).toBe(6);
  });

  it("never grows past the cap", () => {
    const window = new WindowControl({
      least: 6,
      most: 20,
      streamBytesPerSecond: 100 * SHARE,
      chunkBytes: CHUNK,
    });
    window.roundTrip(100);
    expect(window.size).toBe(20);
  });
});

describe("RoundTripFloor", () => {
  it("keeps the least of each peer's recent samples, ignoring unusable ones", () => {
    const floor = new RoundTripFloor(4);
    expect(floor.observe("a", undefined, Number.NaN, -1)).toBeUndefined();
    expect(floor.observe("a", 180, 40)).toBe(40);
    // A queue at the round's start inflates the next opening; the floor holds.
    expect(floor.observe("a", 900, undefined)).toBe(40);
    expect(floor.observe("b", 5)).toBe(5);
    expect(floor.observe("a", 300)).toBe(40);
  });

  it("forgets samples older than the last few, so a longer path is learnt", () => {
    const floor = new RoundTripFloor(3);
    floor.observe("a", 10);
    floor.observe("a", 100);
    floor.observe("a", 100);
    expect(floor.observe("a", 100)).toBe(100);
  });
});
