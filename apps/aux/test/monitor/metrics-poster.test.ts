import { pino } from "pino";
import { describe, expect, it } from "vitest";
import { MetricsPoster } from "../../src/monitor/metrics-poster.ts";
import { ResumeWatch } from "../../src/monitor/resume-watch.ts";
import type { AggregatedStep } from "../../src/monitor/step-aggregator.ts";
import { PlatformRequestError, type AuxPlatformClient } from "../../src/platform-client.ts";

const logger = pino({ level: "silent" });

function step(n: number): AggregatedStep {
  return { step: n, loss: 1, samplesPerSecond: 10, alivePeers: 2, time: 0, peers: [] };
}

/** A platform that has recorded steps up to `recorded` and answers each post as the real one would. */
function platform(recorded: number, fail?: (step: number) => Error | undefined) {
  const posted: number[] = [];
  let last = recorded;
  const client = {
    postMetrics: (report: { step: number }) => {
      const error = fail?.(report.step);
      if (error !== undefined) return Promise.reject(error);
      posted.push(report.step);
      const stored = report.step > last;
      if (stored) last = report.step;
      return Promise.resolve({ unknownPeers: 0, stored, timeline: 0, lastStep: last });
    },
  } as unknown as AuxPlatformClient;
  return { client, posted };
}

describe("the metrics poster", () => {
  it("posts steps in order, keeps the ones recorded already aside and posts them again after a resume", async () => {
    const { client, posted } = platform(3);
    const poster = new MetricsPoster({ client, logger, generation: () => 0, resume: new ResumeWatch() });
    poster.add([step(2), step(3), step(4)]);
    await poster.post(0, new AbortController().signal);
    expect(posted).toEqual([2, 3, 4]);
    expect(poster.lastPostedStep).toBe(4);

    // Recorded before (steps 3 and 4), then the swarm turns out to have resumed from step 2.
    poster.add([step(3), step(4)]);
    await poster.post(0, new AbortController().signal);
    expect(poster.lastPostedStep).toBe(4);
    poster.resumeFrom(2);
    expect(poster.lastPostedStep).toBeUndefined();
    await poster.post(0, new AbortController().signal);
    expect(posted).toEqual([2, 3, 4, 3, 4, 3, 4]);
  });

  it("drops a step the platform refuses for good and waits after a failure it may retry", async () => {
    const refusedOnce = new Set([5]);
    const { client, posted } = platform(0, (n) => {
      if (n === 4) return new PlatformRequestError("INVALID_INPUT", "no", { status: 400 });
      if (refusedOnce.delete(n)) return new PlatformRequestError("NETWORK", "down");
      return undefined;
    });
    const poster = new MetricsPoster({ client, logger, generation: () => 0, resume: new ResumeWatch() });
    poster.add([step(4), step(5), step(6)]);
    await poster.post(0, new AbortController().signal);
    // 4 refused for good and dropped; 5 failed and waits, 6 behind it.
    expect(posted).toEqual([]);
    await poster.post(0, new AbortController().signal);
    expect(posted).toEqual([]);
    await poster.post(Date.now() + 60_000, new AbortController().signal);
    expect(posted).toEqual([5, 6]);
  });
});
