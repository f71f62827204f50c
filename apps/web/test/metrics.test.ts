import { testDatabaseProviders } from "@barnraise/prisma/testing";
import { parseExperimentConfig, PeerRole } from "@barnraise/protocol";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { GET as getMetrics, POST as postMetrics } from "../app/api/v1/experiments/[id]/metrics/route.ts";
import type { MetricSeries } from "../src/api/schemas/public.ts";
import { findExperiment } from "../src/server/services/experiment-access.ts";
import { downsampleSteps } from "../src/server/services/read-metrics.ts";
import {
  createToken,
  createUser,
  errorCode,
  joinNode,
  postSignedJson,
  setAllowlistStatus,
  setUpAux,
  type AuxSetup,
  type JoinedNode,
} from "./support/peer-fixtures.ts";
import { callRoute, createTestApp, type TestApp } from "./support/test-app.ts";
import { creditBound } from "../src/server/metrics-ingestion.ts";
import type { AuxCaller } from "../src/server/records.ts";

interface PeerReport {
  peerId: string;
  samples: number;
  computeSeconds: number;
  bytesAggregated: number;
  sessionSeconds: number;
  session?: string;
  averaging?: boolean;
}

describe.each(testDatabaseProviders())("metrics (%s)", (provider) => {
  let app: TestApp;
  let setup: AuxSetup;
  let trainers: JoinedNode[];
  let path: string;

  beforeEach(async () => {
    app = await createTestApp(provider);
    setup = await setUpAux(app);
    path = `/api/v1/experiments/${setup.experimentId}/metrics`;
    trainers = [];
    for (let i = 0; i < 2; i++) {
      const volunteer = await createUser(app);
      await setAllowlistStatus(app, setup.experimentId, volunteer, "approved");
      trainers.push(
        await joinNode(setup.experimentId, await createToken(app, setup.experimentId, volunteer)),
      );
    }
  });
  afterEach(async () => {
    await app.dispose();
  });

  const peer = (node: JoinedNode, values: Partial<PeerReport> = {}): PeerReport => ({
    peerId: node.peerId,
    samples: 0,
    computeSeconds: 0,
    bytesAggregated: 0,
    sessionSeconds: 0,
    ...values,
  });

  function post(step: number, peers: PeerReport[], extra: Record<string, unknown> = {}): Promise<Response> {
    return postSignedJson(postMetrics, path, { id: setup.experimentId }, setup.aux, {
      step,
      loss: 3 - step / 100,
      samplesPerSecond: 120.5,
      alivePeers: peers.length,
      time: Date.UTC(2026, 10, 21, 12, 0, step),
      peers,
      ...extra,
    });
  }

  async function contributionOf(node: JoinedNode) {
    const row = await app.db.peer.findFirstOrThrow({
      where: { peerId: node.peerId },
      select: { lastSeenAt: true, contributions: true },
    });
    return { lastSeenAt: row.lastSeenAt, contribution: row.contributions[0] };
  }

  it("records the step and each known peer's contribution, ignoring unknown peers", async () => {
    const [a, b] = trainers;
    if (!a || !b) throw new Error("two trainers expected");
    const before = Date.now();
    await app.db.peer.updateMany({ data: { lastSeenAt: new Date(0) } });
    const outsider = await setUpAux(app);
    const response = await post(7, [
      peer(a, { samples: 640, computeSeconds: 12.5, sessionSeconds: 30 }),
      peer(b, { samples: 320, computeSeconds: 6 }),
      peer(setup.aux, { bytesAggregated: 5_000_000_000 }),
      // A real peer of another experiment, and a string that is no PeerId: both unknown here.
      peer(outsider.aux, { samples: 99 }),
      { ...peer(a), peerId: "12D3KooWnotapeer" },
    ]);
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({
      ok: true,
      unknownPeers: 2,
      stored: true,
      timeline: 0,
      lastStep: 7,
    });

    const metric = await app.db.metric.findFirstOrThrow({ where: { experimentId: setup.experimentId } });
    expect(metric).toMatchObject({ step: 7, loss: 2.93, samplesPerSecond: 120.5, alivePeers: 5 });
    expect(metric.recordedAt.toISOString()).toBe("2026-11-21T12:00:07.000Z");

    const first = await contributionOf(a);
    expect(first.contribution).toMatchObject({
      samples: 640n,
      computeSeconds: 12.5,
      bytesAggregated: 0n,
      longestSessionSeconds: 30,
    });
    expect(first.lastSeenAt.getTime()).toBeGreaterThanOrEqual(before);
    // 64-bit counters survive.
    expect((await contributionOf(setup.aux)).contribution?.bytesAggregated).toBe(5_000_000_000n);
    expect(await app.db.contribution.count({ where: { experimentId: outsider.experimentId } })).toBe(0);
  });

  it("never moves cumulative counters backwards, and keeps the longest session", async () => {
    const [a] = trainers;
    if (!a) throw new Error("a trainer expected");
    await post(1, [peer(a, { samples: 1000, computeSeconds: 50, bytesAggregated: 10, sessionSeconds: 600 })]);
    // A lagging monitor reports older counters, and the peer restarted its session.
    await post(2, [peer(a, { samples: 900, computeSeconds: 60, bytesAggregated: 5, sessionSeconds: 20 })]);
    expect((await contributionOf(a)).contribution).toMatchObject({
      samples: 1000n,
      computeSeconds: 60,
      bytesAggregated: 10n,
      longestSessionSeconds: 600,
    });
    await post(3, [peer(a, { samples: 1500, computeSeconds: 61, bytesAggregated: 11, sessionSeconds: 700 })]);
    expect((await contributionOf(a)).contribution).toMatchObject({
      samples: 1500n,
      computeSeconds: 61,
      bytesAggregated: 11n,
      longestSessionSeconds: 700,
    });
    expect(await app.db.contribution.count()).toBe(1);
  });

  it("keeps counters monotonic when two monitors report at once", async () => {
    const [a] = trainers;
    if (!a) throw new Error("a trainer expected");
    const reports = Array.from({ length: 12 }, (_, i) => i * 100);
    const responses = await Promise.all(
      [...reports]
        .reverse()
        .map((samples, i) => post(100 + i, [peer(a, { samples, sessionSeconds: samples })])),
    );
    expect(responses.map((response) => response.status)).toEqual(reports.map(() => 200));
    expect((await contributionOf(a)).contribution).toMatchObject({
      samples: 1100n,
      longestSessionSeconds: 1100,
    });
  });

  it("writes reports that arrive together in a few statements, each answered as if sent alone", async () => {
    const [a, b] = trainers;
    if (!a || !b) throw new Error("two trainers expected");
    const statements = async () =>
      (await app.ctx.metrics.dbQuery.get()).values
        .filter((value) => value.metricName?.endsWith("_count") === true)
        .reduce((sum, value) => sum + value.value, 0);
    const before = await statements();
    // 24 reports at once: steps 200 to 211, each sent twice; counters in no particular order.
    const sent = Array.from({ length: 24 }, (_, i) => ({
      step: 200 + (i % 12),
      samples: ((i * 7) % 24) * 10,
      loss: i / 10,
    }));
    const responses = await Promise.all(
      sent.map(({ step, samples, loss }) =>
        post(step, [peer(a, { samples, sessionSeconds: samples }), peer(b, { averaging: step % 2 === 0 })], {
          loss,
        }),
      ),
    );
    const answers = (await Promise.all(responses.map((response) => response.json()))) as {
      stored: boolean;
      lastStep: number;
      unknownPeers: number;
    }[];
    // Far fewer statements than one set per report (about eight each when written alone).
    expect((await statements()) - before).toBeLessThan(sent.length * 3);

    // Each step stored once, by exactly one of its two reports, with that report's values.
    const rows = await app.db.metric.findMany({
      where: { experimentId: setup.experimentId },
      orderBy: { step: "asc" },
    });
    expect(rows.map((row) => row.step)).toEqual(Array.from({ length: 12 }, (_, i) => 200 + i));
    for (const row of rows) {
      const storedBy = sent.flatMap((report, i) =>
        report.step === row.step && answers[i]?.stored ? [report] : [],
      );
      expect(storedBy).toHaveLength(1);
      expect(row.loss).toBeCloseTo(storedBy[0]?.loss ?? NaN, 6);
    }
    for (const [i, answer] of answers.entries()) {
      expect(answer.unknownPeers).toBe(0);
      expect(answer.lastStep).toBeGreaterThanOrEqual(sent[i]?.step ?? Infinity);
    }
    // Counters are the largest reported, whatever the order the batch held them in.
    expect((await contributionOf(a)).contribution).toMatchObject({
      samples: 230n,
      longestSessionSeconds: 230,
    });
    const after = await post(212, [peer(a)]);
    expect(await after.json()).toMatchObject({ stored: true, lastStep: 212 });
  });

  it("writes a batch of reports that name more peers together than one statement may bind", async () => {
    const [a] = trainers;
    if (!a) throw new Error("a trainer expected");
    const experiment = await findExperiment(app.ctx, setup.experimentId);
    const auxPeer = await app.db.peer.findFirstOrThrow({ where: { peerId: setup.aux.peerId } });
    const caller = {
      experiment,
      peer: { id: auxPeer.id, peerId: auxPeer.peerId, userId: auxPeer.userId, role: PeerRole.aux },
    } as AuxCaller;
    const warn = vi.spyOn(app.ctx.logger, "warn");
    // 40 reports queued at once (one batch) of 1,000 peers each: 40,000 PeerIds, above SQLite's
    // 32,766 parameters per statement.
    const answers = await Promise.all(
      Array.from({ length: 40 }, (_, r) =>
        app.ctx.ingestion.write(caller, {
          step: 300 + r,
          generation: 0,
          loss: 1,
          samplesPerSecond: 1,
          alivePeers: 1000,
          time: Date.now(),
          peers: [
            peer(a, { samples: r }),
            ...Array.from({ length: 999 }, (_, i) => ({ ...peer(a), peerId: `unknown-${r}-${i}` })),
          ].map((reported) => ({ ...reported, session: "" })),
        }),
      ),
    );
    // Written as one batch: it did not fail and fall back to one report at a time.
    expect(warn).not.toHaveBeenCalled();
    expect(answers.map((answer) => answer.unknownPeers)).toEqual(answers.map(() => 999));
    expect(answers.every((answer) => answer.stored && answer.lastStep === 339)).toBe(true);
    expect((await contributionOf(a)).contribution).toMatchObject({ samples: 39n });
  });

  it("counts a peer listed twice once, with the larger values", async () => {
    const [a] = trainers;
    if (!a) throw new Error("a trainer expected");
    const response = await post(1, [
      peer(a, { samples: 5, computeSeconds: 9 }),
      peer(a, { samples: 8, computeSeconds: 2 }),
    ]);
    expect(await response.json()).toMatchObject({ ok: true, unknownPeers: 0 });
    expect((await contributionOf(a)).contribution).toMatchObject({ samples: 8n, computeSeconds: 9 });
  });

  it("stores whether each trainer averages, as the aux reports it, and leaves it when not reported", async () => {
    const [a, b] = trainers;
    if (!a || !b) throw new Error("two trainers expected");
    const averaging = async (node: JoinedNode) =>
      (await app.db.peer.findFirstOrThrow({ where: { peerId: node.peerId }, select: { averaging: true } }))
        .averaging;
    expect(await averaging(a)).toBeNull();
    await post(1, [peer(a, { averaging: true }), peer(b, { averaging: false })]);
    expect([await averaging(a), await averaging(b)]).toEqual([true, false]);
    // Not reported (an aux that cannot tell yet): the last verdict stays.
    await post(2, [peer(a), peer(b)]);
    expect([await averaging(a), await averaging(b)]).toEqual([true, false]);
    // Two sessions of one node in one report: it averages if either does.
    await post(3, [
      peer(b, { session: "old", averaging: false }),
      peer(b, { session: "new", averaging: true }),
      peer(a, { averaging: false }),
    ]);
    expect([await averaging(a), await averaging(b)]).toEqual([false, true]);
    const malformed = await post(4, [{ ...peer(a), averaging: "yes" } as unknown as PeerReport]);
    expect(await errorCode(malformed)).toEqual({ status: 400, code: "INVALID_INPUT" });
  });

  it("stores each step's bytes per peer, utilization and samples, and null from an aux that leaves them out", async () => {
    const [a] = trainers;
    if (!a) throw new Error("a trainer expected");
    // An older aux reports step 1 without them; the upgraded one reports steps 2 and 3 with them.
    await post(1, [peer(a)]);
    await post(2, [peer(a)], { bytesPerPeer: 1_234_567.5, utilization: 0.875, samples: 4_096 });
    await post(3, [peer(a)], { bytesPerPeer: 0, utilization: 1 });
    const rows = await app.db.metric.findMany({
      where: { experimentId: setup.experimentId },
      orderBy: { step: "asc" },
      select: { step: true, bytesPerPeer: true, utilization: true, samples: true },
    });
    expect(rows).toEqual([
      { step: 1, bytesPerPeer: null, utilization: null, samples: null },
      { step: 2, bytesPerPeer: 1_234_567.5, utilization: 0.875, samples: 4_096 },
      { step: 3, bytesPerPeer: 0, utilization: 1, samples: null },
    ]);

    // The public series carries them, and a repeated step keeps the recorded values.
    await post(2, [peer(a)], { bytesPerPeer: 1, utilization: 0.1, samples: 1 });
    const response = await callRoute(getMetrics, path, { params: { id: setup.experimentId } });
    const series = (await response.json()) as MetricSeries;
    expect(
      series.points.map(({ step, bytesPerPeer, utilization, samples }) => [
        step,
        bytesPerPeer,
        utilization,
        samples,
      ]),
    ).toEqual([
      [1, null, null, null],
      [2, 1_234_567.5, 0.875, 4_096],
      [3, 0, 1, null],
    ]);
  });

  it("never overwrites a step that is sent again, but still records the contributions", async () => {
    const [a] = trainers;
    if (!a) throw new Error("a trainer expected");
    const first = await post(4, [peer(a, { samples: 10 })], { loss: 1.5, alivePeers: 3 });
    expect(await first.json()).toMatchObject({ stored: true, timeline: 0, lastStep: 4 });
    const again = await post(4, [peer(a, { samples: 20 })], { loss: 1.25, alivePeers: 4, time: 0 });
    expect(again.status).toBe(200);
    expect(await again.json()).toEqual({
      ok: true,
      unknownPeers: 0,
      stored: false,
      timeline: 0,
      lastStep: 4,
    });
    const metrics = await app.db.metric.findMany({ where: { experimentId: setup.experimentId } });
    expect(metrics).toHaveLength(1);
    expect(metrics[0]).toMatchObject({ step: 4, loss: 1.5, alivePeers: 3 });
    expect(metrics[0]?.recordedAt.toISOString()).toBe("2026-11-21T12:00:04.000Z");
    expect((await contributionOf(a)).contribution).toMatchObject({ samples: 20n });
    // An older step arriving late is still recorded once, and the last step stays the highest.
    const late = await post(3, []);
    expect(await late.json()).toMatchObject({ stored: true, lastStep: 4 });
  });

  it("credits a node no more than the run can have trained: a first total of 2^47 samples is cut", async () => {
    const [a, b] = trainers;
    if (!a || !b) throw new Error("two trainers expected");
    await app.db.experiment.update({
      where: { id: setup.experimentId },
      data: { swarmSamplesPerSecond: 500 },
    });
    const { training } = parseExperimentConfig({});
    // The aux first saw the liar's session 30 s ago; the honest node's session, 40 s ago.
    await post(1, [
      peer(a, { samples: 2 ** 47, computeSeconds: 1e9, sessionSeconds: 30 }),
      peer(b, { samples: 12_000, computeSeconds: 35, sessionSeconds: 40 }),
    ]);
    const bound = creditBound({ config: "{}", swarmSamplesPerSecond: 500 }, 30_000);
    expect(bound.samples).toBe(2 * 500 * 30 + 4 * training.targetBatchSize);
    const liar = (await contributionOf(a)).contribution;
    expect(Number(liar?.samples)).toBeGreaterThan(bound.samples - 1_000);
    expect(Number(liar?.samples)).toBeLessThanOrEqual(bound.samples);
    expect(liar?.computeSeconds).toBeLessThanOrEqual(30 * 2 + 60 + 1);
    // The honest node is credited what it reported.
    expect((await contributionOf(b)).contribution).toMatchObject({ samples: 12_000n, computeSeconds: 35 });
    // Reported again: the liar's credit does not move; the honest node's next step counts.
    await post(2, [
      peer(a, { samples: 2 ** 47, computeSeconds: 1e9, sessionSeconds: 31 }),
      peer(b, { samples: 12_000 + training.targetBatchSize, computeSeconds: 36, sessionSeconds: 41 }),
    ]);
    // The same total again is no new work: credited once, never again.
    expect((await contributionOf(a)).contribution?.samples).toBe(liar?.samples);
    expect((await contributionOf(b)).contribution?.samples).toBe(BigInt(12_000 + training.targetBatchSize));
  });

  it("does not record a step far past what the run can have reached since its last recorded one", async () => {
    const [a] = trainers;
    if (!a) throw new Error("a trainer expected");
    const now = Date.now();
    expect(await (await post(10, [peer(a)], { time: now })).json()).toMatchObject({
      stored: true,
      lastStep: 10,
    });
    // A forged step a million ahead, a second later: refused, nothing on the curve.
    const forged = await post(1_000_010, [peer(a, { samples: 64 })], { time: now + 1_000, loss: 0.0001 });
    expect(forged.status).toBe(200);
    expect(await forged.json()).toMatchObject({ stored: false, lastStep: 10 });
    expect(await app.db.metric.count({ where: { experimentId: setup.experimentId, step: 1_000_010 } })).toBe(
      0,
    );
    // The contributions of that report still count (they are bounded on their own).
    expect((await contributionOf(a)).contribution).toMatchObject({ samples: 64n });
    // The run's real next steps are recorded.
    expect(await (await post(11, [peer(a)], { time: now + 1_000 })).json()).toMatchObject({ stored: true });
  });

  it("records a swarm that trained on far ahead while the platform was down", async () => {
    const [a] = trainers;
    if (!a) throw new Error("a trainer expected");
    const hourAgo = Date.now() - 3_600_000;
    expect(await (await post(10, [peer(a)], { time: hourAgo })).json()).toMatchObject({ stored: true });
    // An hour at 10 steps per second.
    const resumed = await post(36_010, [peer(a)], { time: Date.now() });
    expect(await resumed.json()).toMatchObject({ stored: true, lastStep: 36_010 });
  });

  it("refuses malformed reports with the offending field", async () => {
    const [a] = trainers;
    if (!a) throw new Error("a trainer expected");
    const cases: [Record<string, unknown>, string][] = [
      [{ step: -1 }, "step"],
      [{ step: 1.5 }, "step"],
      [{ loss: "low" }, "loss"],
      [{ samplesPerSecond: -3 }, "samplesPerSecond"],
      [{ alivePeers: 2.5 }, "alivePeers"],
      [{ time: "now" }, "time"],
      [{ bytesPerPeer: -1 }, "bytesPerPeer"],
      [{ bytesPerPeer: "1 MB" }, "bytesPerPeer"],
      [{ utilization: 1.01 }, "utilization"],
      [{ utilization: -0.1 }, "utilization"],
      [{ samples: -1 }, "samples"],
      [{ samples: "4k" }, "samples"],
      [{ peers: [{ ...peer(a), samples: -1 }] }, "peers.0.samples"],
      [{ peers: [{ ...peer(a), bytesAggregated: 0.5 }] }, "peers.0.bytesAggregated"],
      [{ peers: [{ ...peer(a), sessionSeconds: -1 }] }, "peers.0.sessionSeconds"],
      [{ peers: [{ peerId: a.peerId }] }, "peers.0.samples"],
      [{ surprise: 1 }, ""],
    ];
    for (const [override, field] of cases) {
      const response = await post(1, [], override);
      const body = (await response.json()) as { error: { code: string; issues?: { path: string }[] } };
      expect(response.status, JSON.stringify(override)).toBe(400);
      expect(body.error.code).toBe("INVALID_INPUT");
      expect(body.error.issues?.map((issue) => issue.path)).toContain(field);
    }
    expect(await app.db.metric.count()).toBe(0);
  });

  it("refuses a body over 256 KiB (PAYLOAD_TOO_LARGE)", async () => {
    const [a] = trainers;
    if (!a) throw new Error("a trainer expected");
    const response = await post(
      1,
      Array.from({ length: 3000 }, () => peer(a)),
    );
    expect(await errorCode(response)).toEqual({ status: 413, code: "PAYLOAD_TOO_LARGE" });
  });

  it("downsamples a long run to at most maxPoints, keeping the first and last steps", async () => {
    const steps = 5000;
    await app.db.metric.createMany({
      data: Array.from({ length: steps }, (_, step) => ({
        experimentId: setup.experimentId,
        step,
        loss: 3 * Math.exp(-step / 1000) + 0.1 * Math.sin(step / 7),
        samplesPerSecond: step * 2,
        alivePeers: step % 13,
        recordedAt: new Date(Date.UTC(2026, 10, 21) + step * 1000),
      })),
    });
    const read = async (query: string) => {
      const response = await callRoute(getMetrics, `${path}${query}`, { params: { id: setup.experimentId } });
      expect(response.status).toBe(200);
      return (await response.json()) as MetricSeries;
    };

    for (const [query, limit] of [
      ["", 500],
      ["?maxPoints=100", 100],
      ["?maxPoints=2", 2],
      ["?maxPoints=5000", 5000],
    ] as const) {
      const series = await read(query);
      expect(series.total).toBe(steps);
      expect(series.points.length).toBeLessThanOrEqual(limit);
      expect(series.points.length).toBeGreaterThan(limit / 2);
      expect(series.points[0]?.step).toBe(0);
      expect(series.points.at(-1)?.step).toBe(steps - 1);
      const order = series.points.map((point) => point.step);
      expect(order).toEqual([...order].sort((x, y) => x - y));
      // Each kept point keeps its own step's fields.
      for (const point of series.points) {
        expect(point.samplesPerSecond).toBe(point.step * 2);
        expect(point.alivePeers).toBe(point.step % 13);
        expect(point.recordedAt).toBe(new Date(Date.UTC(2026, 10, 21) + point.step * 1000).toISOString());
      }
    }
    expect((await read("?maxPoints=5000")).points).toHaveLength(5000);

    for (const query of [
      "?maxPoints=1",
      "?maxPoints=5001",
      "?maxPoints=abc",
      "?maxPoints=",
      "?maxPoints=2.5",
    ]) {
      const response = await callRoute(getMetrics, `${path}${query}`, { params: { id: setup.experimentId } });
      expect(await errorCode(response), query).toEqual({ status: 400, code: "INVALID_INPUT" });
    }
  });

  it("returns a short run whole, and 404 for an unknown experiment", async () => {
    await post(2, []);
    await post(1, []);
    const response = await callRoute(getMetrics, path, { params: { id: setup.experimentId } });
    const series = (await response.json()) as MetricSeries;
    expect(series.total).toBe(2);
    expect(series.points.map((point) => point.step)).toEqual([1, 2]);
    expect(series.points[0]).toEqual({
      step: 1,
      loss: 2.99,
      samplesPerSecond: 120.5,
      alivePeers: 0,
      bytesPerPeer: null,
      utilization: null,
      samples: null,
      recordedAt: "2026-11-21T12:00:01.000Z",
      timeline: 0,
      discarded: false,
    });
    expect(series.events).toEqual([]);
    const missing = await callRoute(getMetrics, "/api/v1/experiments/nope/metrics", {
      params: { id: "nope" },
    });
    expect(await errorCode(missing)).toEqual({ status: 404, code: "NOT_FOUND" });
  });
});

describe("downsampleSteps", () => {
  const point = (step: number, loss: number) => ({
    step,
    loss,
    samplesPerSecond: step,
    alivePeers: 1,
    recordedAt: new Date(step),
  });

  it("keeps the spike that a uniform stride would drop", () => {
    const points = Array.from({ length: 1000 }, (_, step) => point(step, step === 503 ? 50 : 1));
    const kept = downsampleSteps(points, 20);
    expect(kept.length).toBeLessThanOrEqual(20);
    expect(kept.map((p) => p.step)).toContain(503);
    expect(kept[0]?.step).toBe(0);
    expect(kept.at(-1)?.step).toBe(999);
  });

  it("keeps the first and last points when asked for two", () => {
    const points = Array.from({ length: 10 }, (_, step) => point(step, step));
    expect(downsampleSteps(points, 2).map((p) => p.step)).toEqual([0, 9]);
  });

  it("returns short series unchanged", () => {
    const points = [point(0, 1), point(1, 2), point(2, 3)];
    expect(downsampleSteps(points, 3)).toEqual(points);
  });
});
