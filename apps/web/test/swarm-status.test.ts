import { testDatabaseProviders } from "@barnraise/prisma/testing";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { GET as getExperiment } from "../app/api/v1/experiments/[id]/route.ts";
import { GET as getMyNodes } from "../app/api/v1/me/nodes/route.ts";
import { nodeListSchema } from "../src/api/schemas/nodes.ts";
import { FLAG_AFTER_REFUSALS, listImplausibleNodes } from "../src/server/services/list-implausible-nodes.ts";
import { SWARM_SEEN_WITHIN_MS } from "../src/server/services/peer-status.ts";
import { POST as postSwarmStatus } from "../app/api/v1/experiments/[id]/swarm-status/route.ts";
import { MAX_HEARTBEAT_BODY_BYTES } from "../src/api/schemas/peer.ts";
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
import { callRoute, createTestApp, sessionCookie, type TestApp } from "./support/test-app.ts";

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
      split: null,
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
      split: null,
    });
    clock += 30_000;
    expect((await swarm()).alivePeers).toBe(3);
    clock += 1;
    expect(await swarm()).toEqual({
      alivePeers: 0,
      samplesPerSecond: 0,
      seenAt: iso(seen),
      waitingSince: iso(seen),
      split: null,
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
      split: null,
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
    expect(
      await errorCode(await sendRaw(jsonBytes({ ...valid, pad: "x".repeat(MAX_HEARTBEAT_BODY_BYTES) }))),
    ).toEqual({
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

  describe("what the swarm did with each node (My nodes)", () => {
    async function myNode(cookie: string, peerId: string) {
      const response = await callRoute(getMyNodes, "/api/v1/me/nodes", { cookie });
      expect(response.status).toBe(200);
      const node = nodeListSchema.parse(await response.json()).nodes.find((n) => n.peerId === peerId);
      if (node === undefined) throw new Error(`no node ${peerId}`);
      return node;
    }

    async function volunteerNode() {
      const user = await createUser(app);
      await setAllowlistStatus(app, setup.experimentId, user, "approved");
      const token = await createToken(app, setup.experimentId, user);
      const node = await joinNode(setup.experimentId, token);
      return { user, token, node, cookie: await sessionCookie(user) };
    }

    function report(extra: Record<string, unknown>, time = clock): Promise<Response> {
      return postSignedJson(
        postSwarmStatus,
        path,
        { id: setup.experimentId },
        setup.aux,
        { alivePeers: 1, samplesPerSecond: 10, step: 7, time, ...extra },
        { time: clock },
      );
    }

    it("counts a trainer only once the aux reports the swarm accepting it and it averages", async () => {
      const { node, token, cookie } = await volunteerNode();
      // The platform let it in; the swarm has said nothing of it yet.
      expect(await myNode(cookie, node.peerId)).toMatchObject({ counted: false, reason: "not_in_swarm" });
      expect((await report({ trainers: [{ peerId: node.peerId }] })).status).toBe(200);
      expect(await myNode(cookie, node.peerId)).toMatchObject({
        counted: false,
        reason: "joining",
        swarmSeenAt: iso(clock),
      });
      clock += 5_000;
      expect((await report({ trainers: [{ peerId: node.peerId, averaging: true }] })).status).toBe(200);
      expect(await myNode(cookie, node.peerId)).toMatchObject({ counted: true, reason: null });
      // An unknown verdict later keeps the last one.
      clock += 5_000;
      expect((await report({ trainers: [{ peerId: node.peerId }] })).status).toBe(200);
      expect(await myNode(cookie, node.peerId)).toMatchObject({ counted: true });
      // The node keeps refreshing its pass, but the swarm stops listing it.
      clock += SWARM_SEEN_WITHIN_MS + 1;
      await joinNode(setup.experimentId, token, node.key);
      expect(await myNode(cookie, node.peerId)).toMatchObject({ counted: false, reason: "not_in_swarm" });
    });

    it("shows a trainer its volunteer's rules hold as paused, with why, until the aux reports it training again", async () => {
      const { node, cookie } = await volunteerNode();
      await report({ trainers: [{ peerId: node.peerId, averaging: true }] });
      expect(await myNode(cookie, node.peerId)).toMatchObject({ counted: true, pauseReasons: null });
      clock += 5_000;
      await report({ trainers: [{ peerId: node.peerId, averaging: true, paused: ["in-use"] }] });
      expect(await myNode(cookie, node.peerId)).toMatchObject({
        counted: false,
        reason: "paused",
        pauseReasons: ["in-use"],
      });
      clock += 5_000;
      await report({ trainers: [{ peerId: node.peerId, averaging: true, paused: ["busy", "battery"] }] });
      expect((await myNode(cookie, node.peerId)).pauseReasons).toEqual(["busy", "battery"]);
      clock += 5_000;
      await report({ trainers: [{ peerId: node.peerId, averaging: true }] });
      expect(await myNode(cookie, node.peerId)).toMatchObject({ counted: true, pauseReasons: null });
      // Reasons the platform does not know, or repeated, are refused.
      for (const paused of [["sleepy"], ["busy", "busy"], []]) {
        expect(await errorCode(await report({ trainers: [{ peerId: node.peerId, paused }] }))).toEqual({
          status: 400,
          code: "INVALID_INPUT",
        });
      }
    });

    it("shows the swarm's refusal and its reason, until the swarm accepts the node or it joins with a new token", async () => {
      const { user, node, cookie } = await volunteerNode();
      await report({ trainers: [{ peerId: node.peerId, averaging: true }] });
      clock += 5_000;
      // The aux's clock runs an hour ahead of the platform's: the refusal is dated by its age.
      const auxClock = clock + 3_600_000;
      const refused = {
        peerId: node.peerId,
        code: "PASS_REVOKED",
        reason: "the token this node joined with was revoked",
        at: auxClock - 2_000,
      };
      expect((await report({ refused: [refused] }, auxClock)).status).toBe(200);
      const shown = await myNode(cookie, node.peerId);
      expect(shown).toMatchObject({
        counted: false,
        reason: "refused_by_swarm",
        swarmRefusal: { at: iso(clock - 2_000), code: "PASS_REVOKED", reason: refused.reason },
      });
      // An older report of the same refusal changes nothing.
      expect((await report({ refused: [{ ...refused, at: auxClock - 60_000 }] }, auxClock)).status).toBe(200);
      expect((await myNode(cookie, node.peerId)).swarmRefusal?.at).toBe(iso(clock - 2_000));

      // Accepted again afterwards: counted.
      clock += 5_000;
      await report({ trainers: [{ peerId: node.peerId, averaging: true }] });
      expect(await myNode(cookie, node.peerId)).toMatchObject({ counted: true });
      // Refused again; then the volunteer restarts the same machine with a new token.
      clock += 5_000;
      await report({ refused: [{ ...refused, at: clock }] }, clock);
      expect(await myNode(cookie, node.peerId)).toMatchObject({ reason: "refused_by_swarm" });
      const fresh = await createToken(app, setup.experimentId, user);
      await joinNode(setup.experimentId, fresh, node.key);
      expect(await myNode(cookie, node.peerId)).toMatchObject({ counted: true, swarmRefusal: null });
    });

    it("flags a node once the aux refused several of its progress records as implausible, for the organizer, with the reason", async () => {
      const { user, node } = await volunteerNode();
      expect(await listImplausibleNodes(app.ctx, setup.organizer, setup.experimentId)).toEqual([]);
      // The aux's clock runs a minute behind the platform's: the refusal is dated by its age.
      const auxClock = clock - 60_000;
      const refused = {
        peerId: node.peerId,
        reason: "epoch 1000050 is past 54",
        count: FLAG_AFTER_REFUSALS,
        at: auxClock - 1_000,
      };
      // Fewer refusals than FLAG_AFTER_REFUSALS (an honest node's restart mid-round) flag nothing.
      const once = { ...refused, count: FLAG_AFTER_REFUSALS - 1, at: auxClock - 2_000 };
      expect((await report({ implausible: [once] }, auxClock)).status).toBe(200);
      expect(await listImplausibleNodes(app.ctx, setup.organizer, setup.experimentId)).toEqual([]);
      expect((await report({ implausible: [refused] }, auxClock)).status).toBe(200);
      const flagged = {
        peerId: node.peerId,
        username: user.username,
        ownerStatus: "approved",
        reason: refused.reason,
        count: FLAG_AFTER_REFUSALS,
        at: iso(clock - 1_000),
      };
      expect(await listImplausibleNodes(app.ctx, setup.organizer, setup.experimentId)).toEqual([flagged]);
      // A restarted aux counts from 1 again: the count kept is the largest, the reason the latest.
      clock += 5_000;
      const later = { ...refused, reason: "samplesPerSecond 1e9 is more than 64 × 40", count: 1, at: clock };
      expect((await report({ implausible: [later] }, clock)).status).toBe(200);
      expect(await listImplausibleNodes(app.ctx, setup.organizer, setup.experimentId)).toEqual([
        { ...flagged, reason: later.reason, at: iso(clock) },
      ]);
      // Only the organizer sees the list.
      await expect(listImplausibleNodes(app.ctx, user, setup.experimentId)).rejects.toThrow();
      // Malformed reports change nothing.
      for (const extra of [
        { implausible: [{ ...refused, peerId: "not a peer id" }] },
        { implausible: [{ ...refused, count: -1 }] },
        { implausible: [{ ...refused, reason: "x".repeat(513) }] },
      ]) {
        expect(await errorCode(await report(extra)), JSON.stringify(extra)).toEqual({
          status: 400,
          code: "INVALID_INPUT",
        });
      }
    });

    it("touches only this experiment's nodes, and refuses malformed reports", async () => {
      const other = await setUpAux(app);
      const otherOwner = await createUser(app);
      await setAllowlistStatus(app, other.experimentId, otherOwner, "approved");
      const outsider = await joinNode(
        other.experimentId,
        await createToken(app, other.experimentId, otherOwner),
      );
      const refusal = { peerId: outsider.peerId, code: "PASS_REVOKED", reason: "revoked", at: clock };
      expect(
        (await report({ trainers: [{ peerId: outsider.peerId, averaging: true }], refused: [refusal] }))
          .status,
      ).toBe(200);
      const row = await app.db.peer.findFirstOrThrow({ where: { peerId: outsider.peerId } });
      expect(row).toMatchObject({ swarmSeenAt: null, swarmRefusedAt: null, averaging: null });

      for (const extra of [
        { trainers: [{ peerId: "not a peer id" }] },
        { trainers: [{ peerId: outsider.peerId, averaging: "yes" }] },
        { refused: [{ ...refusal, code: "lowercase" }] },
        { refused: [{ ...refusal, reason: "x".repeat(513) }] },
        { split: { kind: "diverged", step: 1, since: clock, groups: [], summary: "" } },
        {
          split: {
            kind: "other",
            step: 1,
            since: clock,
            groups: [
              { digest: null, peers: [] },
              { digest: null, peers: [] },
            ],
            summary: "",
          },
        },
      ]) {
        expect(await errorCode(await report(extra)), JSON.stringify(extra)).toEqual({
          status: 400,
          code: "INVALID_INPUT",
        });
      }
    });

    it("shows a split on the public view while the aux reports it and its heartbeat is fresh", async () => {
      const split = {
        kind: "diverged",
        step: 140,
        since: clock,
        groups: [
          { digest: "0123456789abcdef", peers: [setup.aux.peerId] },
          { digest: "fedcba9876543210", peers: [setup.aux.peerId] },
        ],
        summary: "2 different models at step 140",
      };
      expect((await report({ split })).status).toBe(200);
      const since = clock;
      expect((await swarm()).split).toEqual({
        kind: "diverged",
        step: 140,
        since: iso(since),
        summary: split.summary,
        groups: split.groups,
      });
      clock += 5_000;
      await report({ split: { ...split, step: 150 } });
      expect((await swarm()).split).toMatchObject({ step: 150, since: iso(since) });
      clock += 31_000;
      expect((await swarm()).split).toBeNull();
      await report({ split: null });
      expect((await swarm()).split).toBeNull();
      const row = await app.db.experiment.findUniqueOrThrow({ where: { id: setup.experimentId } });
      expect(row).toMatchObject({ splitSince: null, split: null });
    });
  });
});
