import { describe, expect, it } from "vitest";
import {
  formatClock,
  formatCompactCount,
  formatDayClock,
  formatDuration,
  formatInstant,
} from "../app/_components/dashboard/dashboard-format.ts";
import { formatBytes, formatPercent } from "../app/_components/format.ts";

// The dashboard's human formats: durations, compact counts, bytes, shares and UTC clock times.

describe("formatDuration", () => {
  it("shows the two largest units", () => {
    expect(formatDuration(45)).toBe("45 s");
    expect(formatDuration(200)).toBe("3 min 20 s");
    expect(formatDuration(3 * 3600 + 4 * 60 + 59)).toBe("3 h 4 min");
    expect(formatDuration(2 * 86_400 + 5 * 3600 + 7)).toBe("2 d 5 h");
  });

  it("drops a smaller unit that is zero", () => {
    expect(formatDuration(7200)).toBe("2 h");
    expect(formatDuration(86_400 + 30)).toBe("1 d");
    expect(formatDuration(60)).toBe("1 min");
  });

  it("rounds to the second and handles nothing and nonsense", () => {
    expect(formatDuration(0)).toBe("0 s");
    expect(formatDuration(0.4)).toBe("0 s");
    expect(formatDuration(59.6)).toBe("1 min");
    expect(formatDuration(-1)).toBe("—");
    expect(formatDuration(Number.NaN)).toBe("—");
  });

  it("separates the thousands of a very long run", () => {
    expect(formatDuration(1234 * 86_400)).toBe("1,234 d");
  });
});

describe("formatCompactCount", () => {
  it("leaves small counts whole", () => {
    expect(formatCompactCount(0)).toBe("0");
    expect(formatCompactCount(999)).toBe("999");
  });

  it("uses k, M, B with about three significant digits", () => {
    expect(formatCompactCount(1000)).toBe("1 k");
    expect(formatCompactCount(12_500)).toBe("12.5 k");
    expect(formatCompactCount(150_400)).toBe("150 k");
    expect(formatCompactCount(1_234_567)).toBe("1.2 M");
    expect(formatCompactCount(340_000_000)).toBe("340 M");
    expect(formatCompactCount(7_800_000_000)).toBe("7.8 B");
  });

  it("moves to the next unit when rounding reaches a thousand", () => {
    expect(formatCompactCount(999_950)).toBe("1 M");
    expect(formatCompactCount(99_960)).toBe("100 k");
  });
});

describe("formatBytes", () => {
  it("shows a mean of bytes per peer in decimal units, whole bytes below a kilobyte", () => {
    expect(formatBytes(0)).toBe("0 B");
    expect(formatBytes(512.4)).toBe("512 B");
    expect(formatBytes(999.6)).toBe("1.0 kB");
    expect(formatBytes(48_200)).toBe("48.2 kB");
    expect(formatBytes(1_234_567.5)).toBe("1.2 MB");
    expect(formatBytes(250_000_000)).toBe("250 MB");
  });
});

describe("formatPercent", () => {
  it("shows a share with three significant digits", () => {
    expect(formatPercent(0)).toBe("0 %");
    expect(formatPercent(0.015)).toBe("1.5 %");
    expect(formatPercent(0.8734)).toBe("87.3 %");
    expect(formatPercent(0.25)).toBe("25 %");
    expect(formatPercent(1)).toBe("100 %");
    expect(formatPercent(0.0001)).toBe("0.01 %");
    expect(formatPercent(Number.NaN)).toBe("NaN");
  });
});

describe("clock formats", () => {
  const ms = Date.parse("2026-11-21T14:03:07.500Z");

  it("are in UTC whatever the machine's time zone", () => {
    expect(formatClock(ms)).toBe("14:03");
    expect(formatDayClock(ms)).toBe("11-21 14:03");
    expect(formatInstant(ms)).toBe("2026-11-21 14:03:07 UTC");
  });
});
