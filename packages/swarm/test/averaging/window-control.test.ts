import { describe, expect, it } from "vitest";
import { paceRates, RoundTripFloor, StreamPacer, WindowControl } from "../../src/averaging/part-exchange.ts";

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

describe("StreamPacer", () => {
  /** A pacer on a fake clock whose sleeps advance the clock and are recorded. */
  function fakePacer(bytesPerSecond: number) {
    let now = 0;
    const sleeps: number[] = [];
    const pacer = new StreamPacer(bytesPerSecond, {
      now: () => now,
      sleep: (ms) => {
        sleeps.push(ms);
        now += ms;
        return Promise.resolve();
      },
    });
    return { pacer, sleeps, advance: (ms: number) => (now += ms) };
  }
  const signal = new AbortController().signal;

  it("lets a stream send 100 ms at 1.25 × its share at once, then holds it to that pace", async () => {
    // 8,000 B/s × 1.25 = 10 bytes per ms: 1,000 bytes at once, then one more 1,000 every 100 ms.
    const { pacer, sleeps } = fakePacer(8000);
    await pacer.beforeSend(0, signal);
    await pacer.beforeSend(1000, signal);
    expect(sleeps).toEqual([]);
    await pacer.beforeSend(2000, signal);
    await pacer.beforeSend(3000, signal);
    expect(sleeps).toEqual([100, 100]);
  });

  it("does not wait for a stream that fell behind its pace", async () => {
    const { pacer, sleeps, advance } = fakePacer(8000);
    await pacer.beforeSend(0, signal);
    advance(500); // the window held it back: 5,000 bytes of pace unused
    await pacer.beforeSend(5000, signal);
    expect(sleeps).toEqual([]);
    await pacer.beforeSend(7000, signal);
    expect(sleeps).toEqual([100]);
  });

  it("leaves a stream with no measured rate unpaced", async () => {
    for (const rate of [0, Number.NaN, -5, Number.POSITIVE_INFINITY]) {
      const { pacer, sleeps } = fakePacer(rate);
      await pacer.beforeSend(0, signal);
      await pacer.beforeSend(1e9, signal);
      expect(sleeps).toEqual([]);
    }
  });

  it("gives up its wait when the round is aborted", async () => {
    const pacer = new StreamPacer(1000);
    const round = new AbortController();
    await pacer.beforeSend(0, round.signal);
    const waiting = pacer.beforeSend(10_000, round.signal);
    round.abort(new Error("round over"));
    await expect(waiting).rejects.toThrow("round over");
  });
});

describe("paceRates", () => {
  it("paces the small parts at their share of the upload and leaves the large ones free", () => {
    // Set-up D's slow member 1: 15 small parts and the fast reducer's 219,296 elements.
    const lengths = [2600, 2600, ...Array.from({ length: 14 }, () => 2700), 219_296];
    const rates = paceRates(lengths, 1, 250_000);
    const sending = lengths.reduce((sum, length, j) => (j === 1 ? sum : sum + length), 0);
    expect(rates[1]).toBe(0); // its own part
    expect(rates[0]).toBeCloseTo((250_000 * 2600) / sending, 6);
    expect(rates[2]).toBeCloseTo((250_000 * 2700) / sending, 6);
    expect(rates[16]).toBe(0);
  });

  it("paces nothing when the parts are about equal, or when no upload was measured", () => {
    expect(paceRates([15_420, 15_421, 15_420, 15_421], 0, 250_000)).toEqual([0, 0, 0, 0]);
    expect(paceRates([100, 5000, 100], 1, 0)).toEqual([0, 0, 0]);
    expect(paceRates([100, 5000, 100], 1, Number.NaN)).toEqual([0, 0, 0]);
    expect(paceRates([0, 0], 0, 250_000)).toEqual([0, 0]);
  });
});
