import { describe, expect, it } from "vitest";
import { WindowControl } from "../../src/averaging/part-exchange.ts";

const CHUNK = 8192;
/** 10 Mbit/s of upload shared by 3 streams, in bytes per second. */
const SHARE = 1_250_000 / 3;

describe("WindowControl", () => {
  it("adds the stream's bandwidth-delay product, in chunks, to the starting window", () => {
    const window = new WindowControl({ least: 6, most: 256, streamBytesPerSecond: SHARE, chunkBytes: CHUNK });
    expect(window.size).toBe(6);
    window.roundTrip(100); // 41.7 KB in flight over 100 ms = 5.1 chunks
    expect(window.size).toBe(12);
    window.roundTrip(0.5); // half a millisecond: a fraction of a chunk, rounded up
    expect(window.size).toBe(7);
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
