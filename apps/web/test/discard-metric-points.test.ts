import { testDatabaseProviders } from "@barnraise/prisma/testing";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { POST as postDiscard } from "../app/api/v1/experiments/[id]/metrics/discard/route.ts";
import { GET as getMetrics, POST as postMetrics } from "../app/api/v1/experiments/[id]/metrics/route.ts";
import { POST as postTimelines } from "../app/api/v1/experiments/[id]/timelines/route.ts";
import type { MetricSeries } from "../src/api/schemas/public.ts";
import { scanForAlerts } from "../src/server/alerts/alert-monitor.ts";
import { readLatestMetric } from "../src/server/queries/latest-metric.ts";
import { listDiscardedMetricPoints } from "../src/server/services/list-discarded-metric-points.ts";
import {
  createUser,
  errorCode,
  postSignedJson,
  setAllowlistStatus,
  setUpAux,
  type AuxSetup,
  type FixtureUser,
} from "./support/peer-fixtures.ts";
import { callRoute, createTestApp, sessionCookie, type TestApp } from "./support/test-app.ts";

/**
 * The organizer discards loss-curve points a forged or broken report put there, and restores them:
 * only the organizer may, a discarded point leaves every view, and the ingest's reference of how far
 * a report may jump ahead no longer counts it. Metrics arrive through the aux's signed route.
 */
describe.each(testDatabaseProviders())("discarding loss-curve points (%s)", (provider) => {
  let clock: number;
  let app: TestApp;
  let setup: AuxSetup;
  let base: string;

  beforeEach(async () => {
    clock = Date.now();
    app = await createTestApp(provider, { now: () => clock });
    setup = await setUpAux(app);
    base = `/api/v1/experiments/${setup.experimentId}`;
  });
  afterEach(async () => {
    await app.dispose();
  });

  /** The aux reports `step`, aggregated now; resolves to the ingest's answer. */
  async function report(step: number, loss = 3 - step / 100) {
    const response = await postSignedJson(
      postMetrics,
      `${base}/metrics`,
      { id: setup.experimentId },
      setup.aux,
      { step, loss, samplesPerSecond: 100, alivePeers: 2, time: clock, peers: [] },
      { time: clock },
    );
    expect(response.status).toBe(200);
    return (await response.json()) as { stored: boolean; lastStep: number | null };
  }

  async function discard(
    body: unknown,
    as: FixtureUser = setup.organizer,
    experimentId = setup.experimentId,
  ) {
    return callRoute(postDiscard, `/api/v1/experiments/${experimentId}/metrics/discard`, {
      method: "POST",
      params: { id: experimentId },
      body,
      cookie: await sessionCookie(as),
    });
  }

  async function curveSteps(): Promise<{ steps: number[]; total: number }> {
    const response = await callRoute(getMetrics, `${base}/metrics`, { params: { id: setup.experimentId } });
    const series = (await response.json()) as MetricSeries;
    return { steps: series.points.map((point) => point.step), total: series.total };
  }

  async function discardedSteps(): Promise<number[]> {
    return (
      await app.db.metric.findMany({
        where: { experimentId: setup.experimentId, discardedAt: { not: null } },
        orderBy: { step: "asc" },
      })
    ).map((row) => row.step);
  }

  it("lets only the organizer discard: another user, even an approved one, is refused and changes nothing", async () => {
    await report(1);
    const stranger = await createUser(app);
    const volunteer = await createUser(app);
    await setAllowlistStatus(app, setup.experimentId, volunteer, "approved");
    for (const user of [stranger, volunteer]) {
      const refused = await discard({ fromStep: 0, toStep: 10, discarded: true }, user);
      expect(await errorCode(refused)).toEqual({ status: 403, code: "FORBIDDEN" });
    }
    expect(await discardedSteps()).toEqual([]);

    const unknown = await discard(
      { fromStep: 0, toStep: 10, discarded: true },
      setup.organizer,
      "no-such-run",
    );
    expect(await errorCode(unknown)).toEqual({ status: 404, code: "NOT_FOUND" });
    const anonymous = await callRoute(postDiscard, `${base}/metrics/discard`, {
      method: "POST",
      params: { id: setup.experimentId },
      body: { fromStep: 0, toStep: 10, discarded: true },
    });
    expect(await errorCode(anonymous)).toEqual({ status: 401, code: "UNAUTHENTICATED" });

    const done = await discard({ fromStep: 0, toStep: 10, discarded: true });
    expect(done.status).toBe(200);
    expect(await done.json()).toEqual({ discarded: true, timeline: 0, fromStep: 0, toStep: 10, changed: 1 });
  });

  it("refuses a bad range or timeline with INVALID_INPUT naming the field", async () => {
    await report(1);
    const cases: [unknown, string][] = [
      [{ fromStep: 5, toStep: 4, discarded: true }, "toStep"],
      [{ fromStep: -1, toStep: 4, discarded: true }, "fromStep"],
      [{ fromStep: 1.5, toStep: 4, discarded: true }, "fromStep"],
      [{ fromStep: 0, toStep: 2_147_483_648, discarded: true }, "toStep"],
      [{ fromStep: 0, toStep: 4 }, "discarded"],
      [{ fromStep: 0, toStep: 4, discarded: "yes" }, "discarded"],
      [{ fromStep: 0, toStep: 4, discarded: true, timeline: -1 }, "timeline"],
      // The run has only its first timeline.
      [{ fromStep: 0, toStep: 4, discarded: true, timeline: 1 }, "timeline"],
      [{ fromStep: 0, toStep: 4, discarded: true, steps: [1] }, ""],
    ];
    for (const [body, path] of cases) {
      const response = await discard(body);
      const error = ((await response.json()) as { error: { code: string; issues?: { path: string }[] } })
        .error;
      expect(response.status, JSON.stringify(body)).toBe(400);
      expect(error.code).toBe("INVALID_INPUT");
      expect(
        error.issues?.map((issue) => issue.path),
        JSON.stringify(body),
      ).toContain(path);
    }
    expect(await discardedSteps()).toEqual([]);
  });

  it("takes discarded points out of the curve and the latest metric, and a restore brings them back", async () => {
    for (const step of [1, 2, 3, 4, 5]) expect((await report(step)).stored).toBe(true);

    const discarded = await discard({ fromStep: 4, toStep: 5, discarded: true });
    expect(await discarded.json()).toMatchObject({ changed: 2, timeline: 0 });
    expect(await curveSteps()).toEqual({ steps: [1, 2, 3], total: 3 });
    expect(await readLatestMetric(app.ctx, setup.experimentId)).toMatchObject({ step: 3 });
    const row = await app.db.metric.findFirstOrThrow({
      where: { experimentId: setup.experimentId, step: 5 },
    });
    expect(row.discardedBy).toBe(setup.organizer.id);
    expect(row.discardedAt?.getTime()).toBe(clock);
    // The manage page lists them.
    const listed = await listDiscardedMetricPoints(app.ctx, setup.organizer, setup.experimentId);
    expect(listed.total).toBe(2);
    expect(listed.points.map((point) => point.step)).toEqual([4, 5]);

    // A wider discard changes only the points still shown; the others keep their first discard's time.
    clock += 60_000;
    expect(await (await discard({ fromStep: 0, toStep: 5, discarded: true })).json()).toMatchObject({
      changed: 3,
    });
    const again = await app.db.metric.findFirstOrThrow({
      where: { experimentId: setup.experimentId, step: 5 },
    });
    expect(again.discardedAt?.getTime()).toBe(clock - 60_000);
    expect(await curveSteps()).toEqual({ steps: [], total: 0 });
    expect(await readLatestMetric(app.ctx, setup.experimentId)).toBeNull();

    // A discarded step stays taken: reported again, it is not stored.
    expect(await report(5, 0.0001)).toMatchObject({ stored: false });
    expect(await app.db.metric.count({ where: { experimentId: setup.experimentId, step: 5 } })).toBe(1);

    // Restoring one point, then a range.
    expect(await (await discard({ fromStep: 5, toStep: 5, discarded: false })).json()).toMatchObject({
      discarded: false,
      changed: 1,
    });
    expect(await curveSteps()).toEqual({ steps: [5], total: 1 });
    expect(await readLatestMetric(app.ctx, setup.experimentId)).toMatchObject({ step: 5, loss: 2.95 });
    expect(await (await discard({ fromStep: 0, toStep: 3, discarded: false })).json()).toMatchObject({
      changed: 3,
    });
    expect(await curveSteps()).toEqual({ steps: [1, 2, 3, 5], total: 4 });
    expect(await discardedSteps()).toEqual([4]);
    const restored = await app.db.metric.findFirstOrThrow({
      where: { experimentId: setup.experimentId, step: 3 },
    });
    expect(restored).toMatchObject({ discardedAt: null, discardedBy: null });
  });

  it("no longer measures reachable steps from a discarded forged step far ahead", async () => {
    expect(await report(10)).toMatchObject({ stored: true, lastStep: 10 });
    // A forged point a million steps ahead got onto the curve (stored directly: the ingest refuses it).
    await app.db.metric.create({
      data: {
        experimentId: setup.experimentId,
        step: 1_000_000,
        loss: 0.0001,
        samplesPerSecond: 1,
        alivePeers: 1,
        recordedAt: new Date(clock),
      },
    });
    // While it counts, the run's last step is the forged one, and a step just past it is believable.
    expect(await report(11)).toMatchObject({ stored: true, lastStep: 1_000_000 });

    expect((await discard({ fromStep: 1_000_000, toStep: 1_000_000, discarded: true })).status).toBe(200);
    // The reference is the real curve again: its next step is stored, a step past the forged one is not.
    expect(await report(12)).toMatchObject({ stored: true, lastStep: 12 });
    expect(await report(1_000_050)).toMatchObject({ stored: false, lastStep: 12 });
    expect(await app.db.metric.count({ where: { experimentId: setup.experimentId, step: 1_000_050 } })).toBe(
      0,
    );
    // Sent again, the forged step is refused, and its row stays discarded.
    expect(await report(1_000_000)).toMatchObject({ stored: false, lastStep: 12 });
    expect(await discardedSteps()).toEqual([1_000_000]);

    // A resume from the real last step is not behind the run: no new timeline.
    const resumed = await postSignedJson(
      postTimelines,
      `${base}/timelines`,
      { id: setup.experimentId },
      setup.aux,
      { fromStep: 12, reason: "resumed" },
      { time: clock },
    );
    expect(await resumed.json()).toEqual({ timeline: 0, forked: false, lastStep: 12 });
  });

  it("counts neither a discard nor a restore as progress of the run", async () => {
    await report(1);
    await report(2);
    await scanForAlerts(app.ctx);
    const settings = () =>
      app.db.alertSettings.findUniqueOrThrow({ where: { experimentId: setup.experimentId } });
    const first = await settings();
    expect(first.progressAt?.getTime()).toBe(clock);

    clock += 60_000;
    await discard({ fromStep: 2, toStep: 2, discarded: true });
    await scanForAlerts(app.ctx);
    clock += 60_000;
    await discard({ fromStep: 2, toStep: 2, discarded: false });
    await scanForAlerts(app.ctx);
    expect(await settings()).toMatchObject({
      progressAt: first.progressAt,
      lastMetricId: first.lastMetricId,
    });

    // A new step is progress.
    await report(3);
    await scanForAlerts(app.ctx);
    expect((await settings()).progressAt?.getTime()).toBe(clock);
  });
});
