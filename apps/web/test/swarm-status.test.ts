import { testDatabaseProviders } from "@barnraise/prisma/testing";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { GET as getExperiment } from "../app/api/v1/experiments/[id]/route.ts";
import { POST as postSwarmStatus } from "../app/api/v1/experiments/[id]/swarm-status/route.ts";
import type { SwarmStatusView } from "../src/api/schemas/public.ts";
import type { ExperimentView } from "../src/server/services/read-experiment.ts";
import {
  createToken,
  createUser,
  errorCode,
  joinNode,
  jsonBytes,
  postSignedJson,
  setAllowlistStatus,
  setUpAux,
  signedAuthorization,
  type AuxSetup,
} from "./support/peer-fixtures.ts";
import { callRoute, createTestApp, type TestApp } from "./support/test-app.ts";

/**
 * The aux peer's heartbeat (POST /swarm-status) and the swarm as the public view shows it: peers
 * alive only while the heartbeat is at most 30 s old, and since when the run has been waiting once
 * nobody trains.
 */

describe.each(testDatabaseProviders())("swarm status (%s)", (provider) => {
  let app: TestApp;
  let setup: AuxSetup;
  let clock: number;
  let path: string;

  beforeEach(async () => {
    clock = Date.now();
    app = await createTestApp(provider, { now: () => clock });
    setup = await setUpAux(app);
    path = `/api/v1/experiments/${setup.experimentId}/swarm-status`;
  });
  afterEach(async () => {
    await app.dispose();
  });

  const iso = (ms: number) => new Date(ms).toISOString();

  function heartbeat(alivePeers: number, samplesPerSecond = 250.5): Promise<Response> {
    return postSignedJson(
      postSwarmStatus,
      path,
      { id: setup.experimentId },
      setup.aux,
      { alivePeers, samplesPerSecond, step: 42, time: clock },
      { time: clock },
    );
  }

  async function heartbeatOk(alivePeers: number, samplesPerSecond?: number): Promise<void> {
    const response = await heartbeat(alivePeers, samplesPerSecond);
    expect(await response.json()).toEqual({ ok: true });
    expect(response.status).toBe(200);
  }

  async function swarm(): Promise<SwarmStatusView> {
    const response = await callRoute(getExperiment, `/api/v1/experiments/${setup.experimentId}`, {
      params: { id: setup.experimentId },
    });
    expect(response.status).toBe(200);
    return ((await response.json()) as ExperimentView).swarm;
  }

  function sendRaw(body: Uint8Array, contentType = "application/json"): Promise<Response> {
    return callRoute(postSwarmStatus, path, {
      method: "POST",
      params: { id: setup.experimentId },
      body,
      headers: {
        "content-type": contentType,
        authorization: signedAuthorization({ node: setup.aux, path, body, time: clock }),
      },
    });
  }

  it("waits from the experiment's creation until the first heartbeat", async () => {
    const experiment = await app.db.experiment.findUniqueOrThrow({ where: { id: setup.experimentId } });
    expect(await swarm()).toEqual({
      alivePeers: 0,
      samplesPerSecond: 0,
      seenAt: null,
      waitingSince: experiment.createdAt.toISOString(),
    });
  });

  it("shows the heartbeat for 30 s, then no peers alive, waiting since the last heartbeat", async () => {
    const seen = clock;
    const before = await app.db.experiment.findUniqueOrThrow({ where: { id: setup.experimentId } });
    await heartbeatOk(3);
    // A heartbeat is no edit of the experiment.
    const after = await app.db.experiment.findUniqueOrThrow({ where: { id: setup.experimentId } });
    expect(after.updatedAt).toEqual(before.updatedAt);
    expect(await swarm()).toEqual({
      alivePeers: 3,
      samplesPerSecond: 250.5,
      seenAt: iso(seen),
      waitingSince: null,
    });
    clock += 30_000;
    expect((await swarm()).alivePeers).toBe(3);
    clock += 1;
    expect(await swarm()).toEqual({
      alivePeers: 0,
      samplesPerSecond: 0,
      seenAt: iso(seen),
      waitingSince: iso(seen),
    });

    // The swarm comes back: alive again.
    clock += 60_000;
    await heartbeatOk(1);
    expect(await swarm()).toMatchObject({ alivePeers: 1, waitingSince: null });
    // The aux peer's own row counts as seen.
    const aux = await app.db.peer.findFirstOrThrow({ where: { peerId: setup.aux.peerId } });
    expect(aux.lastSeenAt.getTime()).toBe(clock);
  });

  it("records when the swarm falls to no trainers, and keeps that time while nobody trains", async () => {
    await heartbeatOk(2);
    clock += 10_000;
    const idle = clock;
    await heartbeatOk(0, 0);
    expect(await swarm()).toEqual({
      alivePeers: 0,
      samplesPerSecond: 0,
      seenAt: iso(idle),
      waitingSince: iso(idle),
    });
    clock += 10_000;
    await heartbeatOk(0, 0);
    expect(await swarm()).toMatchObject({ alivePeers: 0, seenAt: iso(clock), waitingSince: iso(idle) });
    // Heartbeats stop as well: still waiting since the swarm went idle.
    clock += 120_000;
    expect(await swarm()).toMatchObject({ alivePeers: 0, waitingSince: iso(idle) });
    clock += 10_000;
    await heartbeatOk(4);
    expect(await swarm()).toMatchObject({ alivePeers: 4, waitingSince: null });
    const row = await app.db.experiment.findUniqueOrThrow({ where: { id: setup.experimentId } });
    expect(row.idleSince).toBeNull();
    expect(row.swarmSeenAt?.getTime()).toBe(clock);
  });

  it("after heartbeats stopped, dates a report of no trainers from the last heartbeat", async () => {
    const last = clock;
    await heartbeatOk(2);
    clock += 300_000;
    await heartbeatOk(0, 0);
    expect(await swarm()).toMatchObject({ alivePeers: 0, seenAt: iso(clock), waitingSince: iso(last) });
  });

  it("refuses malformed and oversized heartbeats, changing nothing", async () => {
    const valid = { alivePeers: 1, samplesPerSecond: 1, step: 1, time: 1 };
    for (const body of [
      { ...valid, alivePeers: -1 },
      { ...valid, alivePeers: 1.5 },
      { ...valid, samplesPerSecond: -2 },
      { ...valid, samplesPerSecond: "fast" },
      { ...valid, step: null },
      { alivePeers: 1 },
      { ...valid, extra: true },
      [],
    ]) {
      expect(await errorCode(await sendRaw(jsonBytes(body))), JSON.stringify(body)).toEqual({
        status: 400,
        code: "INVALID_INPUT",
      });
    }
    expect(await errorCode(await sendRaw(new TextEncoder().encode("{not json")))).toEqual({
      status: 400,
      code: "INVALID_INPUT",
    });
    expect(await errorCode(await sendRaw(jsonBytes({ ...valid, pad: "x".repeat(5000) })))).toEqual({
      status: 413,
      code: "PAYLOAD_TOO_LARGE",
    });
    expect(await errorCode(await sendRaw(jsonBytes(valid), "text/plain"))).toEqual({
      status: 415,
      code: "UNSUPPORTED_MEDIA_TYPE",
    });
    expect(await swarm()).toMatchObject({ alivePeers: 0, seenAt: null });
  });

  it("takes heartbeats only from the organizer's aux peers, signed", async () => {
    const volunteer = await createUser(app);
    await setAllowlistStatus(app, setup.experimentId, volunteer, "approved");
    const trainer = await joinNode(setup.experimentId, await createToken(app, setup.experimentId, volunteer));
    const fromTrainer = await postSignedJson(
      postSwarmStatus,
      path,
      { id: setup.experimentId },
      trainer,
      { alivePeers: 99, samplesPerSecond: 1, step: 1, time: clock },
      { time: clock },
    );
    expect(await errorCode(fromTrainer)).toEqual({ status: 401, code: "PASS_WRONG_ROLE" });
    const unsigned = await callRoute(postSwarmStatus, path, {
      method: "POST",
      params: { id: setup.experimentId },
      body: { alivePeers: 99, samplesPerSecond: 1, step: 1, time: clock },
    });
    expect(await errorCode(unsigned)).toEqual({ status: 401, code: "UNAUTHENTICATED" });
    expect((await swarm()).alivePeers).toBe(0);
  });
});
