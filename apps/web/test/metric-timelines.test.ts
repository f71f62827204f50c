import { randomBytes } from "node:crypto";
import { testDatabaseProviders } from "@barnraise/prisma/testing";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { GET as getMetrics, POST as postMetrics } from "../app/api/v1/experiments/[id]/metrics/route.ts";
import { POST as postTimeline } from "../app/api/v1/experiments/[id]/timelines/route.ts";
import type { MetricsIngested, TimelineResponse } from "../src/api/schemas/peer.ts";
import type { CheckpointView, MetricSeries } from "../src/api/schemas/public.ts";
import { downsampleTimelines } from "../src/server/services/read-metrics.ts";
import { upload } from "./support/checkpoint-upload.ts";
import { organizerActions, type OrganizerActions } from "./support/organizer-actions.ts";
import { errorCode, postSignedJson, setUpAux, type AuxSetup } from "./support/peer-fixtures.ts";
import { callRoute, createTestApp, type TestApp } from "./support/test-app.ts";

/**
 * Steps only move forward: metric rows are inserted once per (timeline, step) and never updated;
 * reports of an older rollback generation are refused; a rollback or a resume behind the last
 * recorded step starts a new timeline, and the old timeline's later steps read as discarded.
 */

describe.each(testDatabaseProviders())("metric timelines (%s)", (provider) => {
  let app: TestApp;
  let setup: AuxSetup;
  let organizer: OrganizerActions;
  let path: string;

  beforeEach(async () => {
    app = await createTestApp(provider);
    setup = await setUpAux(app);
    organizer = await organizerActions(setup.organizer, setup.experimentId);
    path = `/api/v1/experiments/${setup.experimentId}/metrics`;
  });
  afterEach(async () => {
    await app.dispose();
  });

  function post(step: number, extra: Record<string, unknown> = {}): Promise<Response> {
    return postSignedJson(postMetrics, path, { id: setup.experimentId }, setup.aux, {
      step,
      loss: 3 - step / 100,
      samplesPerSecond: 100,
      alivePeers: 2,
      time: Date.UTC(2026, 10, 21, 12, 0, step),
      peers: [],
      ...extra,
    });
  }

  async function postOk(step: number, extra: Record<string, unknown> = {}): Promise<MetricsIngested> {
    const response = await post(step, extra);
    const body = (await response.json()) as MetricsIngested;
    expect(response.status, JSON.stringify(body)).toBe(200);
    return body;
  }

  function fork(body: unknown): Promise<Response> {
    return postSignedJson(
      postTimeline,
      `/api/v1/experiments/${setup.experimentId}/timelines`,
      { id: setup.experimentId },
      setup.aux,
      body,
    );
  }

  async function forkOk(fromStep: number): Promise<TimelineResponse> {
    const response = await fork({ fromStep, reason: "resumed" });
    const body = (await response.json()) as TimelineResponse;
    expect(response.status, JSON.stringify(body)).toBe(200);
    return body;
  }

  async function series(): Promise<MetricSeries> {
    const response = await callRoute(getMetrics, path, { params: { id: setup.experimentId } });
    expect(response.status).toBe(200);
    return (await response.json()) as MetricSeries;
  }

  async function checkpoint(step: number): Promise<CheckpointView> {
    const response = await upload({
      node: setup.aux,
      experimentId: setup.experimentId,
      step,
      body: new Uint8Array(randomBytes(64)),
    });
    expect(response.status).toBe(201);
    return (await response.json()) as CheckpointView;
  }

  it("never overwrites a recorded step: a second report with other values leaves the row as it was", async () => {
    expect(await postOk(5, { loss: 1.5, alivePeers: 3 })).toEqual({
      ok: true,
      unknownPeers: 0,
      stored: true,
      timeline: 0,
      lastStep: 5,
    });
    const row = await app.db.metric.findFirstOrThrow({ where: { experimentId: setup.experimentId } });
    expect(await postOk(5, { loss: 0.1, alivePeers: 9, samplesPerSecond: 1, time: 0 })).toEqual({
      ok: true,
      unknownPeers: 0,
      stored: false,
      timeline: 0,
      lastStep: 5,
    });
    expect(await app.db.metric.findMany({ where: { experimentId: setup.experimentId } })).toEqual([row]);
  });

  it("refuses reports of an older generation once the run was rolled back (STALE_GENERATION)", async () => {
    await postOk(1);
    const target = await checkpoint(1);
    await organizer.rollBack(target.id);

    for (const generation of [undefined, 0]) {
      const stale = await post(2, generation === undefined ? {} : { generation });
      expect(await errorCode(stale)).toEqual({ status: 409, code: "STALE_GENERATION" });
    }
    expect(await app.db.metric.count({ where: { experimentId: setup.experimentId } })).toBe(1);
    expect(await postOk(2, { generation: 1 })).toMatchObject({ stored: true, timeline: 1, lastStep: 2 });
    const rows = await app.db.metric.findMany({ where: { timeline: 1 } });
    expect(rows).toMatchObject([{ step: 2, generation: 1 }]);
  });

  it("starts a new timeline only when the swarm resumes behind the last recorded step", async () => {
    // Nothing recorded yet: nothing to fork from.
    expect(await forkOk(0)).toEqual({ timeline: 0, forked: false, lastStep: null });
    for (const step of [1, 2, 3, 4]) await postOk(step);
    // Resuming at or past the last step continues the timeline.
    expect(await forkOk(4)).toEqual({ timeline: 0, forked: false, lastStep: 4 });
    expect(await forkOk(9)).toEqual({ timeline: 0, forked: false, lastStep: 4 });

    expect(await forkOk(2)).toEqual({ timeline: 1, forked: true, lastStep: null });
    // Step 3 again, now in the new timeline: stored, while timeline 0 keeps its own step 3.
    expect(await postOk(3, { loss: 9 })).toMatchObject({ stored: true, timeline: 1, lastStep: 3 });

    const read = await series();
    expect(read.events).toEqual([
      {
        kind: "resumed",
        step: 2,
        fromStep: 4,
        timeline: 1,
        checkpointId: null,
        at: expect.stringMatching(/Z$/) as string,
      },
    ]);
    expect(read.points.map((p) => [p.timeline, p.step, p.discarded])).toEqual([
      [0, 1, false],
      [0, 2, false],
      [0, 3, true],
      [0, 4, true],
      [1, 3, false],
    ]);
    expect(read.total).toBe(5);
    expect(await app.db.runEvent.count()).toBe(1);
  });

  it("refuses malformed or oversized timeline reports", async () => {
    for (const body of [
      { fromStep: -1, reason: "resumed" },
      { fromStep: 1.5, reason: "resumed" },
      { fromStep: 1, reason: "bored" },
      { fromStep: 1 },
      { fromStep: 1, reason: "resumed", extra: true },
    ]) {
      expect(await errorCode(await fork(body)), JSON.stringify(body)).toEqual({
        status: 400,
        code: "INVALID_INPUT",
      });
    }
    expect(await errorCode(await fork({ fromStep: 1, reason: "resumed", pad: "x".repeat(5000) }))).toEqual({
      status: 413,
      code: "PAYLOAD_TOO_LARGE",
    });
    expect(
      await app.db.experiment.findUniqueOrThrow({
        where: { id: setup.experimentId },
        select: { timeline: true },
      }),
    ).toEqual({ timeline: 0 });
  });

  it("marks the old timeline's steps after the rollback checkpoint as discarded", async () => {
    for (let step = 1; step <= 10; step++) await postOk(step);
    const target = await checkpoint(5);
    const view = await organizer.rollBack(target.id);
    expect(view.status).toBe("running");
    for (const step of [6, 7]) await postOk(step, { generation: 1 });

    const read = await series();
    expect(read.events).toEqual([
      expect.objectContaining({
        kind: "rolled-back",
        step: 5,
        fromStep: 10,
        timeline: 1,
        checkpointId: target.id,
      }),
    ]);
    const old = read.points.filter((p) => p.timeline === 0);
    expect(old.filter((p) => p.discarded).map((p) => p.step)).toEqual([6, 7, 8, 9, 10]);
    expect(old.filter((p) => !p.discarded).map((p) => p.step)).toEqual([1, 2, 3, 4, 5]);
    expect(read.points.filter((p) => p.timeline === 1)).toMatchObject([
      { step: 6, discarded: false },
      { step: 7, discarded: false },
    ]);

    // A later resume behind step 7 of timeline 1 discards its tail, and nothing more of timeline 0.
    await forkOk(6);
    const again = await series();
    expect(again.points.filter((p) => p.discarded).map((p) => [p.timeline, p.step])).toEqual([
      [0, 6],
      [0, 7],
      [0, 8],
      [0, 9],
      [0, 10],
      [1, 7],
    ]);
  });

  it("refuses a rollback to a checkpoint of another experiment (NOT_FOUND), changing nothing", async () => {
    const other = await setUpAux(app);
    const response = await upload({
      node: other.aux,
      experimentId: other.experimentId,
      step: 3,
      body: new Uint8Array(randomBytes(64)),
    });
    const foreign = (await response.json()) as CheckpointView;
    expect(await errorCode(await organizer.rollBackResponse(foreign.id))).toEqual({
      status: 404,
      code: "NOT_FOUND",
    });
    expect(await errorCode(await organizer.rollBackResponse("nope"))).toEqual({
      status: 404,
      code: "NOT_FOUND",
    });
    const experiment = await app.db.experiment.findUniqueOrThrow({ where: { id: setup.experimentId } });
    expect(experiment).toMatchObject({
      generation: 0,
      timeline: 0,
      controlVersion: 1,
      rollbackCheckpointId: null,
    });
  });
});

describe("downsampleTimelines", () => {
  const point = (timeline: number, step: number) => ({
    timeline,
    step,
    loss: Math.sin(step),
    samplesPerSecond: 1,
    alivePeers: 1,
    recordedAt: new Date(step),
  });

  it("shares the budget between timelines by length, keeping each one's first and last steps", () => {
    const points = [
      ...Array.from({ length: 750 }, (_, step) => point(0, step)),
      ...Array.from({ length: 250 }, (_, step) => point(1, 500 + step)),
    ];
    const kept = downsampleTimelines(points, 100);
    expect(kept).toHaveLength(100);
    const first = kept.filter((p) => p.timeline === 0);
    const second = kept.filter((p) => p.timeline === 1);
    expect(first).toHaveLength(75);
    expect(second).toHaveLength(25);
    expect([first[0]?.step, first.at(-1)?.step, second[0]?.step, second.at(-1)?.step]).toEqual([
      0, 749, 500, 749,
    ]);
  });

  it("never returns more than asked, even with more timelines than points allowed", () => {
    const points = Array.from({ length: 40 }, (_, i) => point(i, i));
    expect(downsampleTimelines(points, 10)).toHaveLength(10);
    expect(downsampleTimelines(points, 40)).toEqual(points);
  });
});
