import { describe, expect, it } from "vitest";
import type { MetricPoint } from "../src/api/schemas/public.ts";
import { timeTickFormatter, toChartPoints } from "../app/_components/dashboard/chart-series.ts";

// The metric series as chart rows.

function point(step: number, recordedAt: string, loss = 1): MetricPoint {
  return { step, loss, samplesPerSecond: step * 10, alivePeers: step % 3, recordedAt };
}

describe("toChartPoints", () => {
  it("keeps every field and turns the time into Unix milliseconds, in order", () => {
    const rows = toChartPoints([
      point(1, "2026-11-21T10:00:00.000Z", 2.5),
      point(2, "2026-11-21T10:00:09.250Z", 2.1),
    ]);
    expect(rows).toEqual([
      { step: 1, time: Date.UTC(2026, 10, 21, 10, 0, 0), loss: 2.5, samplesPerSecond: 10, alivePeers: 1 },
      {
        step: 2,
        time: Date.UTC(2026, 10, 21, 10, 0, 9, 250),
        loss: 2.1,
        samplesPerSecond: 20,
        alivePeers: 2,
      },
    ]);
  });

  it("leaves out a point it cannot place", () => {
    const rows = toChartPoints([
      point(1, "2026-11-21T10:00:00.000Z"),
      point(2, "yesterday"),
      point(3, "2026-11-21T10:00:20.000Z", Number.NaN),
      point(4, "2026-11-21T10:00:30.000Z"),
    ]);
    expect(rows.map((row) => row.step)).toEqual([1, 4]);
  });

  it("maps an empty series to no rows", () => {
    expect(toChartPoints([])).toEqual([]);
  });
});

describe("timeTickFormatter", () => {
  const at = (iso: string) => toChartPoints([point(1, iso)])[0]?.time ?? Number.NaN;

  it("shows the clock for a run within a day and the date too beyond that", () => {
    const short = toChartPoints([point(1, "2026-11-21T10:00:00.000Z"), point(2, "2026-11-22T09:59:00.000Z")]);
    const long = toChartPoints([point(1, "2026-11-21T10:00:00.000Z"), point(2, "2026-11-22T10:00:00.000Z")]);
    const tick = at("2026-11-22T09:30:00.000Z");
    expect(timeTickFormatter(short)(tick)).toBe("09:30");
    expect(timeTickFormatter(long)(tick)).toBe("11-22 09:30");
    expect(timeTickFormatter([])(tick)).toBe("09:30");
  });

  it("adds seconds for a run of a few minutes, whose ticks would otherwise repeat the minute", () => {
    const minutes = toChartPoints([
      point(1, "2026-11-21T10:00:00.000Z"),
      point(2, "2026-11-21T10:09:59.000Z"),
    ]);
    const longer = toChartPoints([
      point(1, "2026-11-21T10:00:00.000Z"),
      point(2, "2026-11-21T10:10:00.000Z"),
    ]);
    const tick = at("2026-11-21T10:04:07.000Z");
    expect(timeTickFormatter(minutes)(tick)).toBe("10:04:07");
    expect(timeTickFormatter(longer)(tick)).toBe("10:04");
    expect(timeTickFormatter(minutes.slice(0, 1))(tick)).toBe("10:04");
  });
});
