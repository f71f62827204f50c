import { describe, expect, it } from "vitest";
import {
  formatClock,
  formatCompactCount,
  formatDayClock,
  formatDuration,
  formatInstant,
} from "../app/_components/dashboard/dashboard-format.ts";

// The dashboard's human formats: durations, compact counts and UTC clock times.

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

describe("clock formats", () => {
  const ms = Date.parse("2026-11-21T14:03:07.500Z");

  it("are in UTC whatever the machine's time zone", () => {
    expect(formatClock(ms)).toBe("14:03");
    expect(formatDayClock(ms)).toBe("11-21 14:03");
    expect(formatInstant(ms)).toBe("2026-11-21 14:03:07 UTC");
  });
});
