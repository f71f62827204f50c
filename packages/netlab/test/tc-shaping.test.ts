import { describe, expect, it } from "vitest";
import {
  DEFAULT_QUEUE_MS,
  FRAME_BYTES,
  MIN_BURST_BYTES,
  MIN_QUEUE_BYTES,
  shapingCommands,
  tbfParameters,
} from "../src/tc-shaping.ts";

describe("tbfParameters", () => {
  it("gives slow links the minimum bucket and queue", () => {
    expect(tbfParameters({ rateMbit: 8 })).toEqual({
      rateBit: 8_000_000,
      burstBytes: MIN_BURST_BYTES,
      limitBytes: MIN_BURST_BYTES + MIN_QUEUE_BYTES,
    });
  });

  it("scales bucket and queue with the rate on fast links", () => {
    const bytesPerSecond = 200e6 / 8;
    expect(tbfParameters({ rateMbit: 200 })).toEqual({
      rateBit: 200_000_000,
      burstBytes: bytesPerSecond * 0.002,
      limitBytes: bytesPerSecond * 0.002 + (bytesPerSecond * DEFAULT_QUEUE_MS) / 1000,
    });
  });

  it("keeps an explicit burst and queue length", () => {
    expect(tbfParameters({ rateMbit: 40, burstBytes: 30_000, queueMs: 100 })).toEqual({
      rateBit: 40_000_000,
      burstBytes: 30_000,
      limitBytes: 30_000 + 500_000,
    });
  });

  it("rounds fractional rates to whole bits per second", () => {
    expect(tbfParameters({ rateMbit: 0.2 }).rateBit).toBe(200_000);
  });
});

describe("shapingCommands", () => {
  it("adds nothing for an unshaped link", () => {
    expect(shapingCommands("eth0", {})).toEqual([]);
    expect(shapingCommands("eth0", { delayMs: 0 })).toEqual([]);
  });

  it("puts one tbf at the root for a rate limit", () => {
    expect(shapingCommands("h1i0", { rateMbit: 8 })).toEqual([
      [
        "qdisc",
        "replace",
        "dev",
        "h1i0",
        "root",
        "handle",
        "1:",
        "tbf",
        "rate",
        "8000000bit",
        "burst",
        `${MIN_BURST_BYTES}`,
        "limit",
        `${MIN_BURST_BYTES + MIN_QUEUE_BYTES}`,
      ],
    ]);
  });

  it("puts netem at the root with the tbf below it for delay plus rate", () => {
    const commands = shapingCommands("eth0", { rateMbit: 1000, delayMs: 50 });
    expect(commands).toHaveLength(2);
    const [netem, tbf] = commands;
    expect(netem?.slice(0, 8)).toEqual(["qdisc", "replace", "dev", "eth0", "root", "handle", "1:", "netem"]);
    expect(netem?.slice(8, 10)).toEqual(["delay", "50000us"]);
    // 1 Gbit/s × 50 ms in flight = 6.25 MB ≈ 4128 frames, doubled for slack.
    expect(Number(netem?.[11])).toBe(Math.ceil((2 * 125e6 * 0.05) / FRAME_BYTES));
    expect(tbf?.slice(0, 8)).toEqual(["qdisc", "replace", "dev", "eth0", "parent", "1:1", "handle", "10:"]);
    expect(tbf).toContain("1000000000bit");
  });

  it("uses netem alone for delay without a rate, with netem's default queue", () => {
    expect(shapingCommands("eth0", { delayMs: 2.5 })).toEqual([
      [
        "qdisc",
        "replace",
        "dev",
        "eth0",
        "root",
        "handle",
        "1:",
        "netem",
        "delay",
        "2500us",
        "limit",
        "1000",
      ],
    ]);
  });

  it("rejects rates, delays and buckets out of range", () => {
    for (const shape of [
      { rateMbit: 0 },
      { rateMbit: Number.NaN },
      { delayMs: -1 },
      { rateMbit: 8, burstBytes: 100 },
      { rateMbit: 8, queueMs: 0 },
    ]) {
      expect(() => shapingCommands("eth0", shape)).toThrow(
        expect.objectContaining({ code: "INVALID_ARGUMENT" }),
      );
    }
  });
});
