import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { CheckpointList, Leaderboard, MetricSeries } from "../src/api/schemas/public.ts";
import {
  apiSources,
  mergeDashboard,
  pollDashboard,
  type DashboardData,
  type DashboardSources,
  type RunState,
} from "../app/_components/dashboard/live-data.ts";
import { startPolling, type Visibility } from "../app/_components/dashboard/poller.ts";

// How the dashboard refreshes: what a poll keeps when a read fails, how answers are checked, and
// when polls run.

const metrics: MetricSeries = {
  points: [
    {
      step: 1,
      loss: 2.3,
      samplesPerSecond: 40,
      alivePeers: 2,
      bytesPerPeer: 2_500_000,
      utilization: 0.9,
      samples: 2_048,
      recordedAt: "2026-11-21T10:00:00.000Z",
      timeline: 0,
      discarded: false,
    },
  ],
  total: 1,
  events: [],
};
const leaderboard: Leaderboard = {
  entries: [
    {
      username: "ada",
      samples: 64,
      computeSeconds: 2,
      bytesAggregated: 0,
      longestSessionSeconds: 2,
      peers: 1,
      nodeKinds: ["browser"],
    },
  ],
};
const checkpoints: CheckpointList = {
  checkpoints: [
    {
      id: "c1",
      step: 1,
      loss: null,
      sizeBytes: 10,
      sha256: "a".repeat(64),
      generation: 0,
      timeline: 0,
      createdAt: "2026-11-21T10:00:00.000Z",
      downloadUrl: "/api/v1/experiments/demo/checkpoints/c1",
      safetensorsUrl: "/api/v1/experiments/demo/checkpoints/c1/safetensors",
      tfjsUrl: "/api/v1/experiments/demo/checkpoints/c1/tfjs/model.json",
      evaluation: null,
    },
  ],
};
const run: RunState = {
  status: "running",
  swarm: {
    alivePeers: 2,
    samplesPerSecond: 40,
    seenAt: "2026-11-21T10:00:05.000Z",
    waitingSince: null,
    split: null,
  },
};
const empty: DashboardData = {
  run: {
    status: "running",
    swarm: {
      alivePeers: 0,
      samplesPerSecond: 0,
      seenAt: null,
      waitingSince: "2026-11-21T09:00:00.000Z",
      split: null,
    },
  },
  metrics: { points: [], total: 0, events: [] },
  leaderboard: { entries: [] },
  checkpoints: { checkpoints: [] },
};

function sources(overrides: Partial<DashboardSources> = {}): DashboardSources {
  return {
    run: () => Promise.resolve(run),
    metrics: () => Promise.resolve(metrics),
    leaderboard: () => Promise.resolve(leaderboard),
    checkpoints: () => Promise.resolve(checkpoints),
    ...overrides,
  };
}

describe("pollDashboard and mergeDashboard", () => {
  it("replaces every part when every read succeeds", async () => {
    const { update, failed } = await pollDashboard(sources(), new AbortController().signal);
    expect(failed).toBe(false);
    expect(mergeDashboard(empty, update)).toEqual({ run, metrics, leaderboard, checkpoints });
  });

  it("keeps the shown part whose read failed and still takes the others", async () => {
    const shown: DashboardData = { ...empty, leaderboard };
    const { update, failed } = await pollDashboard(
      sources({ leaderboard: () => Promise.reject(new Error("offline")) }),
      new AbortController().signal,
    );
    expect(failed).toBe(true);
    const merged = mergeDashboard(shown, update);
    expect(merged).toEqual({ run, metrics, leaderboard, checkpoints });
    expect(merged.leaderboard).toBe(shown.leaderboard);
  });

  it("keeps everything shown when every read fails", async () => {
    const shown: DashboardData = { run, metrics, leaderboard, checkpoints };
    const down = () => Promise.reject(new Error("offline"));
    const { update, failed } = await pollDashboard(
      { run: down, metrics: down, leaderboard: down, checkpoints: down },
      new AbortController().signal,
    );
    expect(failed).toBe(true);
    // The very same object: nothing to re-render.
    expect(mergeDashboard(shown, update)).toBe(shown);
  });
});

describe("apiSources", () => {
  function fakeFetch(answer: (url: string) => Response) {
    const urls: string[] = [];
    const impl = ((input: string | URL | Request) => {
      const url = input instanceof Request ? input.url : input.toString();
      urls.push(url);
      return Promise.resolve(answer(url));
    }) as typeof fetch;
    return { impl, urls };
  }

  it("reads the public routes of the experiment, the curve with 500 points", async () => {
    // The experiment's view carries much more than the dashboard follows; the rest is dropped.
    const experiment = { id: "a b", name: "Demo", config: { model: {} }, ...run };
    const bodies: Record<string, unknown> = {
      "": experiment,
      metrics: metrics,
      leaderboard: leaderboard,
      checkpoints: checkpoints,
    };
    const { impl, urls } = fakeFetch((url) => {
      const part = /\/(metrics|leaderboard|checkpoints)/.exec(url)?.[1] ?? "";
      return Response.json(bodies[part]);
    });
    const read = apiSources("a b", impl);
    const signal = new AbortController().signal;
    await expect(read.run(signal)).resolves.toEqual(run);
    await expect(read.metrics(signal)).resolves.toEqual(metrics);
    await expect(read.leaderboard(signal)).resolves.toEqual(leaderboard);
    await expect(read.checkpoints(signal)).resolves.toEqual(checkpoints);
    expect(urls).toEqual([
      "/api/v1/experiments/a%20b",
      "/api/v1/experiments/a%20b/metrics?maxPoints=500",
      "/api/v1/experiments/a%20b/leaderboard",
      "/api/v1/experiments/a%20b/checkpoints",
    ]);
  });

  it("fails on an error status and on a body that does not match the schema", async () => {
    const signal = new AbortController().signal;
    const down = apiSources("demo", fakeFetch(() => Response.json({ error: {} }, { status: 503 })).impl);
    await expect(down.leaderboard(signal)).rejects.toThrow("503");
    const odd = apiSources("demo", fakeFetch(() => Response.json({ entries: [{ username: 3 }] })).impl);
    await expect(odd.leaderboard(signal)).rejects.toThrow();
    const noSwarm = apiSources("demo", fakeFetch(() => Response.json({ status: "running" })).impl);
    await expect(noSwarm.run(signal)).rejects.toThrow();
  });
});

describe("startPolling", () => {
  class FakeVisibility implements Visibility {
    hidden = false;
    private listeners = new Set<() => void>();
    isHidden() {
      return this.hidden;
    }
    subscribe(listener: () => void) {
      this.listeners.add(listener);
      return () => this.listeners.delete(listener);
    }
    set(hidden: boolean) {
      this.hidden = hidden;
      for (const listener of this.listeners) listener();
    }
    get subscribers() {
      return this.listeners.size;
    }
  }

  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it("polls once per interval after the page's own data, not before", async () => {
    const poll = vi.fn(() => Promise.resolve());
    const stop = startPolling({ intervalMs: 5000, poll, visibility: new FakeVisibility() });
    await vi.advanceTimersByTimeAsync(4999);
    expect(poll).toHaveBeenCalledTimes(0);
    await vi.advanceTimersByTimeAsync(1);
    expect(poll).toHaveBeenCalledTimes(1);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(poll).toHaveBeenCalledTimes(3);
    stop();
  });

  it("never runs two polls at once: the next waits for the previous to end", async () => {
    let finish: () => void = () => undefined;
    const poll = vi.fn(
      () =>
        new Promise<void>((resolve) => {
          finish = resolve;
        }),
    );
    const visibility = new FakeVisibility();
    const stop = startPolling({ intervalMs: 5000, poll, visibility });
    await vi.advanceTimersByTimeAsync(30_000);
    visibility.set(true);
    visibility.set(false);
    await vi.advanceTimersByTimeAsync(30_000);
    expect(poll).toHaveBeenCalledTimes(1);
    finish();
    await vi.advanceTimersByTimeAsync(5000);
    expect(poll).toHaveBeenCalledTimes(2);
    stop();
  });

  it("pauses while the page is hidden and polls at once when it is shown again", async () => {
    const visibility = new FakeVisibility();
    const poll = vi.fn(() => Promise.resolve());
    const stop = startPolling({ intervalMs: 5000, poll, visibility });
    visibility.set(true);
    await vi.advanceTimersByTimeAsync(60_000);
    expect(poll).toHaveBeenCalledTimes(0);
    visibility.set(false);
    await vi.advanceTimersByTimeAsync(0);
    expect(poll).toHaveBeenCalledTimes(1);
    await vi.advanceTimersByTimeAsync(5000);
    expect(poll).toHaveBeenCalledTimes(2);
    stop();
  });

  it("keeps polling after a poll fails", async () => {
    const poll = vi.fn(() => Promise.reject(new Error("offline")));
    const stop = startPolling({ intervalMs: 5000, poll, visibility: new FakeVisibility() });
    await vi.advanceTimersByTimeAsync(15_000);
    expect(poll).toHaveBeenCalledTimes(3);
    stop();
  });

  it("stops: aborts the poll in flight, schedules nothing more, stops listening", async () => {
    const visibility = new FakeVisibility();
    const signals: AbortSignal[] = [];
    const poll = vi.fn((signal: AbortSignal) => {
      signals.push(signal);
      return new Promise<void>(() => undefined);
    });
    const stop = startPolling({ intervalMs: 5000, poll, visibility });
    await vi.advanceTimersByTimeAsync(5000);
    stop();
    expect(signals[0]?.aborted).toBe(true);
    expect(visibility.subscribers).toBe(0);
    visibility.set(false);
    await vi.advanceTimersByTimeAsync(60_000);
    expect(poll).toHaveBeenCalledTimes(1);
  });
});
