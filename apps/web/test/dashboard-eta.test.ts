import { describe, expect, it } from "vitest";
import {
  describeNextStep,
  estimateNextStep,
  median,
  nextStepState,
  type RunStatus,
  type StepTime,
} from "../app/_components/dashboard/eta.ts";

// The "next step" estimate on the public dashboard: median seconds per step over the latest
// intervals, counted from the last recorded step.

const start = Date.parse("2026-11-21T10:00:00.000Z");

/** Points one step apart with the given gaps in seconds. */
function pointsWithGaps(gapsSeconds: readonly number[], firstStep = 1): StepTime[] {
  let ms = start;
  const points: StepTime[] = [{ step: firstStep, recordedAt: new Date(ms).toISOString() }];
  gapsSeconds.forEach((gap, index) => {
    ms += gap * 1000;
    points.push({ step: firstStep + index + 1, recordedAt: new Date(ms).toISOString() });
  });
  return points;
}

function lastMs(points: readonly StepTime[]): number {
  const last = points.at(-1);
  if (last === undefined) throw new Error("no points");
  return Date.parse(last.recordedAt);
}

describe("estimateNextStep", () => {
  it("has no estimate with fewer than two points", () => {
    expect(estimateNextStep([], start)).toEqual({ kind: "unknown" });
    expect(estimateNextStep(pointsWithGaps([]), start)).toEqual({ kind: "unknown" });
  });

  it("subtracts the time since the last step from the step interval", () => {
    const points = pointsWithGaps([10, 10, 10]);
    expect(estimateNextStep(points, lastMs(points) + 3000)).toEqual({
      kind: "due",
      seconds: 7,
      secondsPerStep: 10,
    });
  });

  it("takes the median, so one slow round does not swing the estimate", () => {
    const points = pointsWithGaps([10, 10, 100, 10, 10]);
    const estimate = estimateNextStep(points, lastMs(points));
    expect(estimate).toEqual({ kind: "due", seconds: 10, secondsPerStep: 10 });
  });

  it("uses exactly the last ten intervals", () => {
    // All eleven intervals have median 100 s, the last nine too; only the last ten give (1 + 100) / 2.
    const points = pointsWithGaps([1000, 1, 1, 1, 1, 1, 100, 100, 100, 100, 100]);
    const estimate = estimateNextStep(points, lastMs(points));
    expect(estimate.kind === "due" ? estimate.secondsPerStep : null).toBe(50.5);
  });

  it("divides an interval by the steps it spans (downsampled series)", () => {
    const points: StepTime[] = [
      { step: 100, recordedAt: "2026-11-21T10:00:00.000Z" },
      { step: 105, recordedAt: "2026-11-21T10:00:50.000Z" },
      { step: 110, recordedAt: "2026-11-21T10:01:40.000Z" },
    ];
    const estimate = estimateNextStep(points, Date.parse("2026-11-21T10:01:44.000Z"));
    expect(estimate).toEqual({ kind: "due", seconds: 6, secondsPerStep: 10 });
  });

  it("is overdue once the expected time has passed", () => {
    const points = pointsWithGaps([10, 10]);
    expect(estimateNextStep(points, lastMs(points) + 10_000)).toEqual({
      kind: "overdue",
      secondsPerStep: 10,
    });
    expect(estimateNextStep(points, lastMs(points) + 60_000).kind).toBe("overdue");
    expect(estimateNextStep(points, lastMs(points) + 9_000).kind).toBe("due");
  });

  it("skips intervals it cannot use: no step advance, time going back, unreadable dates", () => {
    const points: StepTime[] = [
      { step: 1, recordedAt: "2026-11-21T10:00:00.000Z" },
      { step: 2, recordedAt: "2026-11-21T10:00:20.000Z" },
      { step: 2, recordedAt: "2026-11-21T10:00:21.000Z" },
      { step: 3, recordedAt: "2026-11-21T10:00:01.000Z" },
      { step: 4, recordedAt: "not a date" },
      { step: 5, recordedAt: "2026-11-21T10:00:21.000Z" },
    ];
    // Only 1→2 (20 s per step) is usable.
    expect(estimateNextStep(points, Date.parse("2026-11-21T10:00:31.000Z"))).toEqual({
      kind: "due",
      seconds: 10,
      secondsPerStep: 20,
    });
    expect(estimateNextStep(points.slice(2, 5), start).kind).toBe("unknown");
  });
});

describe("median", () => {
  it("is the middle value, or the mean of the middle two", () => {
    expect(median([3, 1, 2])).toBe(2);
    expect(median([4, 1, 3, 2])).toBe(2.5);
    expect(median([7])).toBe(7);
  });
});

describe("describeNextStep", () => {
  it("says when the next step is due in words", () => {
    expect(describeNextStep({ kind: "unknown" })).toBe("—");
    expect(describeNextStep({ kind: "overdue", secondsPerStep: 10 })).toBe("any moment");
    expect(describeNextStep({ kind: "due", seconds: 6.2, secondsPerStep: 10 })).toBe("in about 7 s");
    expect(describeNextStep({ kind: "due", seconds: 0.2, secondsPerStep: 10 })).toBe("in about 1 s");
    expect(describeNextStep({ kind: "due", seconds: 200, secondsPerStep: 300 })).toBe("in about 3 min 20 s");
  });
});

describe("nextStepState", () => {
  const points = pointsWithGaps([10, 10, 10]);
  const now = lastMs(points) + 4000;
  const alive: RunStatus = { status: "running", swarm: { alivePeers: 3, waitingSince: null } };

  it("estimates the next step while trainers are alive", () => {
    expect(nextStepState(alive, points, now)).toEqual(estimateNextStep(points, now));
    expect(describeNextStep(nextStepState(alive, points, now))).toBe("in about 6 s");
  });

  it("waits for volunteers, not for an overdue step, when no trainer is alive", () => {
    const idle: RunStatus = {
      status: "running",
      swarm: { alivePeers: 0, waitingSince: "2026-11-21T10:07:30.000Z" },
    };
    const state = nextStepState(idle, points, now + 3_600_000);
    expect(state).toEqual({ kind: "waiting", since: "2026-11-21T10:07:30.000Z" });
    expect(describeNextStep(state)).toBe("Waiting for volunteers since 2026-11-21 10:07 UTC");
    expect(describeNextStep({ kind: "waiting", since: null })).toBe("Waiting for volunteers");
  });

  it("says the organizer paused the run, alive trainers or not", () => {
    for (const alivePeers of [0, 3]) {
      const paused: RunStatus = { status: "paused", swarm: { alivePeers, waitingSince: null } };
      expect(describeNextStep(nextStepState(paused, points, now))).toBe("Paused by the organizer");
    }
  });
});
