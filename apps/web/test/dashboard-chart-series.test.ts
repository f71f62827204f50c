import { describe, expect, it } from "vitest";
import type { MetricPoint, RunEventView } from "../src/api/schemas/public.ts";
import {
  buildSeries,
  latestLivePoint,
  latestReported,
  livePointsByStep,
  stepMarkers,
  timeTickFormatter,
  toChartPoints,
  type ChartPoint,
} from "../app/_components/dashboard/chart-series.ts";
import { describeRunEvent, markerLabel } from "../app/_components/dashboard/run-events.ts";

// The metric series as chart rows: every timeline's points on shared axes, the discarded ones apart
// from the live curve, and a marker where the run restarted from an earlier step.

function point(step: number, recordedAt: string, loss = 1, timeline = 0, discarded = false): MetricPoint {
  return {
    step,
    loss,
    samplesPerSecond: step * 10,
    alivePeers: step % 3,
    bytesPerPeer: null,
    utilization: null,
    samples: null,
    recordedAt,
    timeline,
    discarded,
  };
}

/** A step as an aux that reports bytes per peer, utilization and the step's samples posts it. */
function reported(step: number, bytesPerPeer: number, utilization: number, timeline = 0, discarded = false) {
  const at = new Date(Date.UTC(2026, 10, 21, 10, 0, step)).toISOString();
  return { ...point(step, at, 1, timeline, discarded), bytesPerPeer, utilization, samples: 256 * step };
}

describe("toChartPoints", () => {
  it("keeps every field and turns the time into Unix milliseconds, in order", () => {
    const rows = toChartPoints([
      point(1, "2026-11-21T10:00:00.000Z", 2.5),
      point(2, "2026-11-21T10:00:09.250Z", 2.1),
    ]);
    expect(rows).toEqual([
      {
        step: 1,
        time: Date.UTC(2026, 10, 21, 10, 0, 0),
        loss: 2.5,
        samplesPerSecond: 10,
        alivePeers: 1,
        bytesPerPeer: null,
        utilization: null,
        samples: null,
        timeline: 0,
        discarded: false,
      },
      {
        step: 2,
        time: Date.UTC(2026, 10, 21, 10, 0, 9, 250),
        loss: 2.1,
        samplesPerSecond: 20,
        alivePeers: 2,
        bytesPerPeer: null,
        utilization: null,
        samples: null,
        timeline: 0,
        discarded: false,
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

  it("keeps the bytes per peer, the utilization and the samples a step reports", () => {
    expect(toChartPoints([reported(3, 1.5e6, 0.875)])[0]).toMatchObject({
      step: 3,
      bytesPerPeer: 1.5e6,
      utilization: 0.875,
      samples: 768,
    });
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

  it("reads the span from the earliest and latest time, in whatever order the points come", () => {
    const points = toChartPoints([
      point(2, "2026-11-21T10:05:00.000Z"),
      point(1, "2026-11-21T10:00:00.000Z"),
      point(3, "2026-11-22T10:00:00.000Z"),
      point(4, "2026-11-21T12:00:00.000Z"),
    ]);
    expect(timeTickFormatter(points)(at("2026-11-22T09:30:00.000Z"))).toBe("11-22 09:30");
  });
});

/**
 * A run rolled back twice, as the API lists it (by timeline, then step): timeline 0 reached step 6
 * and was rolled back to step 4; timeline 1 reached step 6 again and was rolled back to step 2;
 * timeline 2 is live at steps 3 and 4. Each point is recorded a minute after the one before.
 */
function twiceRolledBack(): ChartPoint[] {
  const layout: [step: number, timeline: number, discarded: boolean][] = [
    [1, 0, false],
    [2, 0, false],
    [3, 0, true],
    [4, 0, true],
    [5, 0, true],
    [6, 0, true],
    [5, 1, true],
    [6, 1, true],
    [3, 2, false],
    [4, 2, false],
  ];
  return toChartPoints(
    layout.map(([step, timeline, discarded], index) =>
      point(step, new Date(Date.UTC(2026, 10, 21, 10, index)).toISOString(), 10 - index, timeline, discarded),
    ),
  );
}

describe("buildSeries", () => {
  it("puts every point on the live series of a run that never restarted, ascending by x", () => {
    const points = toChartPoints([
      point(2, "2026-11-21T10:01:00.000Z", 2),
      point(1, "2026-11-21T10:00:00.000Z", 3),
    ]);
    const series = buildSeries(points, "step", "loss", { splitDiscarded: true });
    expect(series).toEqual({
      rows: [
        { step: 1, time: Date.UTC(2026, 10, 21, 10, 0), live: 3 },
        { step: 2, time: Date.UTC(2026, 10, 21, 10, 1), live: 2 },
      ],
      livePoints: 2,
      discarded: [],
    });
  });

  it("moves each timeline's discarded points to a series of their own, sharing the step axis", () => {
    const series = buildSeries(twiceRolledBack(), "step", "loss", { splitDiscarded: true });
    expect(series.livePoints).toBe(4);
    expect(series.discarded).toEqual([
      { key: "discarded-0", timeline: 0, points: 4 },
      { key: "discarded-1", timeline: 1, points: 2 },
    ]);
    // Ascending by step, the older timeline first on a tie; each row has exactly one value.
    expect(
      series.rows.map((row) => [
        row.step,
        Object.keys(row).filter((key) => key !== "step" && key !== "time"),
      ]),
    ).toEqual([
      [1, ["live"]],
      [2, ["live"]],
      [3, ["discarded-0"]],
      [3, ["live"]],
      [4, ["discarded-0"]],
      [4, ["live"]],
      [5, ["discarded-0"]],
      [5, ["discarded-1"]],
      [6, ["discarded-0"]],
      [6, ["discarded-1"]],
    ]);
    // The live curve is the run's one lineage: steps 1 and 2 of timeline 0, then timeline 2.
    expect(series.rows.flatMap((row) => (row.live === undefined ? [] : [row.live]))).toEqual([10, 9, 2, 1]);
    expect(series.rows.flatMap((row) => row["discarded-1"] ?? [])).toEqual([4, 3]);
  });

  it("sorts by time on a time axis and plots the metric asked for", () => {
    const series = buildSeries(twiceRolledBack(), "time", "samplesPerSecond", { splitDiscarded: true });
    const times = series.rows.map((row) => row.time);
    expect(times).toEqual([...times].sort((a, b) => a - b));
    expect(series.rows[0]).toEqual({ step: 1, time: Date.UTC(2026, 10, 21, 10, 0), live: 10 });
    expect(series.rows[2]).toEqual({ step: 3, time: Date.UTC(2026, 10, 21, 10, 2), "discarded-0": 30 });
  });

  it("keeps discarded points on the live series when not asked to split them", () => {
    const series = buildSeries(twiceRolledBack(), "time", "alivePeers", { splitDiscarded: false });
    expect(series.discarded).toEqual([]);
    expect(series.livePoints).toBe(10);
    expect(series.rows.every((row) => row.live !== undefined)).toBe(true);
  });
});

describe("the metrics older aux programs do not report", () => {
  // An old aux reported steps 1 and 2; the upgraded one reports from step 3 on.
  const upgraded = () =>
    toChartPoints([
      point(1, "2026-11-21T10:00:01.000Z"),
      point(2, "2026-11-21T10:00:02.000Z"),
      reported(3, 2_000_000, 0.5),
      reported(4, 1_500_000, 0.75),
    ]);

  it("draws only the steps that have the value", () => {
    for (const metric of ["bytesPerPeer", "utilization", "samples"] as const) {
      const series = buildSeries(upgraded(), "step", metric, { splitDiscarded: true });
      expect(series.livePoints).toBe(2);
      expect(series.rows.map((row) => row.step)).toEqual([3, 4]);
    }
    expect(buildSeries(upgraded(), "step", "bytesPerPeer", { splitDiscarded: true }).rows).toEqual([
      { step: 3, time: Date.UTC(2026, 10, 21, 10, 0, 3), live: 2_000_000 },
      { step: 4, time: Date.UTC(2026, 10, 21, 10, 0, 4), live: 1_500_000 },
    ]);
    // The loss of the same run is drawn at every step.
    expect(buildSeries(upgraded(), "step", "loss", { splitDiscarded: true }).livePoints).toBe(4);
  });

  it("has nothing to draw when no step reports the value", () => {
    const old = toChartPoints([point(1, "2026-11-21T10:00:01.000Z"), point(2, "2026-11-21T10:00:02.000Z")]);
    expect(buildSeries(old, "step", "utilization", { splitDiscarded: true })).toEqual({
      rows: [],
      livePoints: 0,
      discarded: [],
    });
    expect(latestReported(old, "utilization")).toBeUndefined();
    expect(latestReported([], "bytesPerPeer")).toBeUndefined();
  });

  it("puts a reported value of zero on the chart", () => {
    const series = buildSeries(toChartPoints([reported(1, 0, 0)]), "step", "bytesPerPeer", {
      splitDiscarded: true,
    });
    expect(series.rows).toEqual([{ step: 1, time: Date.UTC(2026, 10, 21, 10, 0, 1), live: 0 }]);
  });

  it("splits a rolled-back run's discarded values off the live curve", () => {
    const points = toChartPoints([
      reported(1, 100, 0.5),
      reported(2, 200, 0.6, 0, true),
      reported(2, 300, 0.7, 1),
    ]);
    const series = buildSeries(points, "step", "bytesPerPeer", { splitDiscarded: true });
    expect(series.livePoints).toBe(2);
    expect(series.discarded).toEqual([{ key: "discarded-0", timeline: 0, points: 1 }]);
  });

  it("stands at the latest live step that reports the value", () => {
    const points = [
      ...upgraded(),
      // A newer step without the values (an old aux reporting again) and a discarded one.
      ...toChartPoints([point(5, "2026-11-21T10:00:05.000Z"), reported(6, 9, 0.1, 0, true)]),
    ];
    expect(latestReported(points, "bytesPerPeer")).toEqual({ step: 4, value: 1_500_000 });
    expect(latestReported(points, "utilization")).toEqual({ step: 4, value: 0.75 });
  });
});

describe("the live lineage", () => {
  it("stands at the live point of the highest step, not at the last point listed", () => {
    const points = twiceRolledBack();
    expect(latestLivePoint(points)).toMatchObject({ step: 4, timeline: 2 });
    expect(latestLivePoint(points.filter((p) => p.discarded))).toBeUndefined();
    expect(latestLivePoint<ChartPoint>([])).toBeUndefined();
  });

  it("prefers the newer timeline when two live points share a step", () => {
    const points = toChartPoints([
      point(4, "2026-11-21T10:00:00.000Z", 1, 0),
      point(4, "2026-11-21T10:05:00.000Z", 2, 1),
    ]);
    expect(latestLivePoint(points)).toMatchObject({ step: 4, timeline: 1 });
  });

  it("lists the live points ascending by step", () => {
    expect(livePointsByStep(twiceRolledBack()).map((p) => [p.step, p.timeline])).toEqual([
      [1, 0],
      [2, 0],
      [3, 2],
      [4, 2],
    ]);
  });
});

describe("restart markers", () => {
  const rolledBack: RunEventView = {
    kind: "rolled-back",
    step: 20,
    fromStep: 30,
    timeline: 2,
    checkpointId: "c20",
    at: "2026-11-21T10:03:07.000Z",
  };
  const resumed: RunEventView = {
    kind: "resumed",
    step: 10,
    fromStep: 12,
    timeline: 1,
    checkpointId: null,
    at: "2026-11-21T10:01:00.000Z",
  };

  it("labels each restart at its step, ascending by step", () => {
    expect(stepMarkers([rolledBack, resumed])).toEqual([
      { step: 10, label: "resumed at step 10" },
      { step: 20, label: "rolled back to step 20" },
    ]);
    expect(stepMarkers([])).toEqual([]);
    expect(markerLabel({ kind: "rolled-back", step: 1200 })).toBe("rolled back to step 1200");
  });

  it("tells each restart in a sentence worded apart from its marker", () => {
    expect(describeRunEvent(rolledBack)).toBe(
      "2026-11-21 10:03:07 UTC: the organizer rolled the run back from step 30 to the checkpoint of step 20.",
    );
    expect(describeRunEvent({ ...resumed, fromStep: null })).toBe(
      "2026-11-21 10:01:00 UTC: the swarm restarted from the state of step 10.",
    );
    for (const event of [rolledBack, resumed]) {
      expect(describeRunEvent(event).toLowerCase()).not.toContain(markerLabel(event));
    }
  });
});
