import { randomBytes } from "node:crypto";
import { testDatabaseProviders } from "@barnraise/prisma/testing";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { GET as getAlerts } from "../app/api/v1/experiments/[id]/alerts/route.ts";
import { POST as postWebhook } from "../app/api/v1/experiments/[id]/alerts/webhooks/route.ts";
import { POST as postJoinRequest } from "../app/api/v1/experiments/[id]/join-requests/route.ts";
import { POST as postMetrics } from "../app/api/v1/experiments/[id]/metrics/route.ts";
import { POST as postSwarmStatus } from "../app/api/v1/experiments/[id]/swarm-status/route.ts";
import { GET as getMyAlerts, PUT as putMyAlerts } from "../app/api/v1/me/alerts/route.ts";
import { PUT as putAlerts } from "../app/api/v1/experiments/[id]/alerts/route.ts";
import { POST as postValidatorFlag } from "../app/api/v1/experiments/[id]/validator-flags/route.ts";
import type { AlertPayload } from "../src/server/alerts/alert-events.ts";
import { createAlertWorker, type AlertWorker } from "../src/server/alerts/alert-worker.ts";
import { createAppContext } from "../src/server/context.ts";
import { STALE_AFTER_MS } from "../src/server/services/peer-status.ts";
import type { AlertSettingsView } from "../src/server/services/read-alert-settings.ts";
import { sessionCookie } from "./support/test-app.ts";
import { upload } from "./support/checkpoint-upload.ts";
import {
  startMailReceiver,
  startWebhookReceiver,
  type MailReceiver,
  type WebhookReceiver,
} from "./support/alert-receivers.ts";
import {
  createToken,
  createUser,
  joinNode,
  postSignedJson,
  validatorFlagEvidence,
  setAllowlistStatus,
  setUpAux,
  type AuxSetup,
  type FixtureUser,
} from "./support/peer-fixtures.ts";
import { callRoute, createTestApp, type TestApp } from "./support/test-app.ts";

/**
 * Each alert event, caused the way it happens for real (a checkpoint uploaded through the route, a
 * join request, metrics and heartbeats from the aux, a node that stops counting) and noticed by the
 * alert worker on a fake clock: each occurrence is announced once, however often the worker looks,
 * and not again after a restart.
 */

const MINUTE = 60_000;

describe.each(testDatabaseProviders())("alert events (%s)", (provider) => {
  let clock: number;
  let mail: MailReceiver;
  let hooks: WebhookReceiver;
  let app: TestApp;
  let setup: AuxSetup;
  let organizerCookie: string;
  let worker: AlertWorker;

  beforeEach(async () => {
    clock = Date.now();
    mail = await startMailReceiver();
    hooks = await startWebhookReceiver(() => clock);
    app = await createTestApp(provider, {
      now: () => clock,
      env: {
        BARNRAISE_SMTP_URL: mail.url,
        BARNRAISE_MAIL_FROM: "alerts@barnraise.test",
        // The webhook receiver runs on this machine's loopback.
        BARNRAISE_WEBHOOK_PRIVATE_ADDRESSES: "allow",
      },
    });
    setup = await setUpAux(app);
    organizerCookie = await sessionCookie(setup.organizer);
    worker = createAlertWorker(app.ctx, "test-worker");
  });
  afterEach(async () => {
    await app.dispose();
    await hooks.close();
    await mail.close();
  });

  const base = () => `/api/v1/experiments/${setup.experimentId}`;

  async function subscribe(events: string[], emails: string[] = []): Promise<void> {
    const response = await callRoute(postWebhook, `${base()}/alerts/webhooks`, {
      method: "POST",
      params: { id: setup.experimentId },
      cookie: organizerCookie,
      body: { url: hooks.url, events },
    });
    const body = (await response.json()) as { secret: string };
    expect(response.status).toBe(201);
    hooks.secret = body.secret;
    if (emails.length > 0) {
      const put = await callRoute(putAlerts, `${base()}/alerts`, {
        method: "PUT",
        params: { id: setup.experimentId },
        cookie: organizerCookie,
        body: { emailRecipients: emails, emailEvents: events },
      });
      expect(put.status).toBe(200);
    }
  }

  /** The alerts the receiver accepted, as their bodies. */
  const payloads = () => hooks.accepted().map((hook) => JSON.parse(hook.body) as AlertPayload);
  const types = () => payloads().map((payload) => payload.type);

  function heartbeat(alivePeers: number, extra: Record<string, unknown> = {}): Promise<Response> {
    return postSignedJson(
      postSwarmStatus,
      `${base()}/swarm-status`,
      { id: setup.experimentId },
      setup.aux,
      { alivePeers, samplesPerSecond: 100, step: 1, time: clock, ...extra },
      { time: clock },
    );
  }

  /** The aux reports `peerId` among the trainers the swarm accepts, averaging. */
  async function accepted(peerId: string): Promise<void> {
    const response = await heartbeat(1, { trainers: [{ peerId, averaging: true }] });
    expect(response.status).toBe(200);
  }

  async function step(n: number): Promise<void> {
    const response = await postSignedJson(
      postMetrics,
      `${base()}/metrics`,
      { id: setup.experimentId },
      setup.aux,
      { step: n, loss: 2, samplesPerSecond: 100, alivePeers: 2, time: clock, peers: [] },
      { time: clock },
    );
    expect(response.status).toBe(200);
  }

  /** Moves the clock on, keeping the aux's heartbeat fresh with `alivePeers` alive. */
  async function wait(ms: number, alivePeers = 2): Promise<void> {
    clock += ms;
    expect((await heartbeat(alivePeers)).status).toBe(200);
  }

  it("announces an uploaded checkpoint by webhook and e-mail", async () => {
    await subscribe(["checkpoint.uploaded"], ["ops@example.org"]);
    const file = new Uint8Array(randomBytes(4096));
    const response = await upload({
      node: setup.aux,
      experimentId: setup.experimentId,
      step: 40,
      loss: 0.5,
      body: file,
    });
    expect(response.status).toBe(201);
    const checkpoint = (await response.json()) as { id: string };
    await worker.tick();

    expect(payloads()).toEqual([
      expect.objectContaining({
        type: "checkpoint.uploaded",
        experiment: expect.objectContaining({ id: setup.experimentId }) as unknown,
        details: expect.objectContaining({
          checkpointId: checkpoint.id,
          step: 40,
          loss: 0.5,
          sizeBytes: 4096,
        }) as unknown,
      }),
    ]);
    expect(mail.mails).toHaveLength(1);
    expect(mail.mails[0]?.to).toEqual(["ops@example.org"]);
    expect(mail.mails[0]?.subject).toMatch(/new checkpoint at step 40/);
    await worker.tick();
    expect(hooks.received).toHaveLength(1);
  });

  it("announces a request to join", async () => {
    await subscribe(["join.requested"]);
    const volunteer = await createUser(app);
    const response = await callRoute(postJoinRequest, `${base()}/join-requests`, {
      method: "POST",
      params: { id: setup.experimentId },
      cookie: await sessionCookie(volunteer),
      body: {},
    });
    expect(response.status).toBe(201);
    await worker.tick();
    expect(payloads()).toEqual([
      expect.objectContaining({
        type: "join.requested",
        summary: expect.stringContaining(volunteer.username) as unknown,
        details: { username: volunteer.username },
      }),
    ]);
  });

  it("announces a node the validator flagged, once per node and run generation", async () => {
    await subscribe(["node.flagged"], ["ops@example.org"]);
    const volunteer = await createUser(app);
    await setAllowlistStatus(app, setup.experimentId, volunteer, "approved");
    const node = await joinNode(setup.experimentId, await createToken(app, setup.experimentId, volunteer));
    const flag = (epoch: number) =>
      postSignedJson(
        postValidatorFlag,
        `${base()}/validator-flags`,
        { id: setup.experimentId },
        setup.aux,
        validatorFlagEvidence(node.peerId, epoch),
      );
    expect((await flag(12)).status).toBe(200);
    // The aux reports again while the node keeps hurting: no second alert.
    expect((await flag(14)).status).toBe(200);
    await worker.tick();
    expect(payloads()).toEqual([
      expect.objectContaining({
        type: "node.flagged",
        summary: expect.stringContaining(volunteer.username) as unknown,
        details: {
          node: node.peerId,
          owner: volunteer.username,
          epoch: 12,
          baselineLoss: 1.25,
          lossAfter: 48.5,
          hurtSamples: 2,
          recentSamples: 3,
        },
      }),
    ]);
    expect(mail.mails).toHaveLength(1);
    expect(mail.mails[0]?.subject).toMatch(/validator flagged/);
  });

  it("announces a split swarm once per split, by webhook and e-mail", async () => {
    await subscribe(["swarm.split"], ["ops@example.org"]);
    const split = {
      kind: "alone",
      step: 90,
      since: clock,
      groups: [
        { digest: null, peers: ["12D3KooWAbc"] },
        { digest: null, peers: ["12D3KooWXyz"] },
      ],
      summary: "trainer 12D3KooWXyz has taken 12 steps in a row with no other trainer while 1 other trains",
    };
    expect((await heartbeat(2, { split })).status).toBe(200);
    await worker.tick();
    expect(types()).toEqual(["swarm.split"]);
    expect(payloads()[0]).toMatchObject({
      summary: expect.stringContaining("has split") as unknown,
      details: { kind: "alone", step: 90, summary: split.summary },
    });
    expect(mail.mails.map((message) => message.subject)).toEqual([
      expect.stringContaining("has split") as unknown,
    ]);
    // The same split, reported again and again: announced once.
    clock += 5_000;
    await heartbeat(2, { split: { ...split, step: 95 } });
    await worker.tick();
    expect(types()).toEqual(["swarm.split"]);
    // It heals and splits anew soon after: shown, but not announced again within 30 minutes.
    const diverged = {
      ...split,
      kind: "diverged",
      groups: split.groups.map((g, i) => ({ ...g, digest: `${i}`.repeat(16) })),
    };
    clock += 5_000;
    await heartbeat(2, { split: null });
    clock += 5_000;
    await heartbeat(2, { split: diverged });
    await worker.tick();
    expect(types()).toEqual(["swarm.split"]);
    // Half an hour later it heals and splits again: announced.
    clock += 30 * MINUTE;
    await heartbeat(2, { split: null });
    clock += 5_000;
    await heartbeat(2, { split: diverged });
    await worker.tick();
    expect(types()).toEqual(["swarm.split", "swarm.split"]);
    expect(payloads()[1]?.details).toMatchObject({ kind: "diverged" });
  });

  it("announces a stalled run once per stall, and not again after a restart", async () => {
    await subscribe(["run.stalled"]);
    await wait(0);
    await step(1);
    await worker.tick();
    await wait(9 * MINUTE);
    await worker.tick();
    expect(types()).toEqual([]);

    await wait(MINUTE);
    await worker.tick();
    expect(types()).toEqual(["run.stalled"]);
    expect(payloads()[0]?.details).toMatchObject({ lastStep: 1, alivePeers: 2, stalledAfterMinutes: 10 });

    // Still stalled: no second alert, from this instance or a restarted one.
    await wait(5 * MINUTE);
    await worker.tick();
    const restarted = createAppContext(app.ctx.env, { now: () => clock, db: app.ctx.db });
    await createAlertWorker(restarted, "restarted").tick();
    expect(types()).toEqual(["run.stalled"]);

    // A new step ends the stall; the next one is announced again.
    await step(2);
    await worker.tick();
    await wait(9 * MINUTE);
    await worker.tick();
    expect(types()).toEqual(["run.stalled"]);
    await wait(MINUTE);
    await worker.tick();
    expect(types()).toEqual(["run.stalled", "run.stalled"]);
    expect(payloads()[1]?.details).toMatchObject({ lastStep: 2 });
  });

  it("does not call a run stalled while nobody trains, and counts from when peers came back", async () => {
    await subscribe(["run.stalled"]);
    await step(1);
    await wait(0, 0);
    await worker.tick();
    await wait(30 * MINUTE, 0);
    await worker.tick();
    expect(types()).toEqual([]);
    // Peers come back: the stall clock starts now, not at the old step.
    await wait(0, 3);
    await worker.tick();
    await wait(9 * MINUTE, 3);
    await worker.tick();
    expect(types()).toEqual([]);
    await wait(MINUTE, 3);
    await worker.tick();
    expect(types()).toEqual(["run.stalled"]);
  });

  it("uses the organizer's thresholds", async () => {
    await subscribe(["run.stalled", "aux.silent"]);
    const put = await callRoute(putAlerts, `${base()}/alerts`, {
      method: "PUT",
      params: { id: setup.experimentId },
      cookie: organizerCookie,
      body: { stalledAfterMinutes: 3, auxSilentAfterMinutes: 2 },
    });
    expect((await put.json()) as AlertSettingsView).toMatchObject({
      stalledAfterMinutes: 3,
      auxSilentAfterMinutes: 2,
    });
    await wait(0);
    await worker.tick();
    await wait(3 * MINUTE);
    await worker.tick();
    expect(types()).toEqual(["run.stalled"]);
    clock += 2 * MINUTE;
    await worker.tick();
    expect(types()).toEqual(["run.stalled", "aux.silent"]);

    const invalid = await callRoute(putAlerts, `${base()}/alerts`, {
      method: "PUT",
      params: { id: setup.experimentId },
      cookie: organizerCookie,
      body: { stalledAfterMinutes: 0, emailRecipients: ["not an address"] },
    });
    const body = (await invalid.json()) as { error: { issues: { path: string }[] } };
    expect(invalid.status).toBe(400);
    expect(body.error.issues.map((issue) => issue.path).sort()).toEqual([
      "emailRecipients.0",
      "stalledAfterMinutes",
    ]);
  });

  it("announces a silent aux once per silence", async () => {
    await subscribe(["aux.silent"]);
    await wait(0);
    await worker.tick();
    clock += 5 * MINUTE - 1;
    await worker.tick();
    expect(types()).toEqual([]);
    clock += 1;
    await worker.tick();
    await worker.tick();
    expect(types()).toEqual(["aux.silent"]);
    expect(payloads()[0]?.details).toMatchObject({ auxSilentAfterMinutes: 5 });

    await wait(0);
    await worker.tick();
    clock += 5 * MINUTE;
    await worker.tick();
    expect(types()).toEqual(["aux.silent", "aux.silent"]);
  });

  describe("a node that stops counting", () => {
    let volunteer: FixtureUser;
    let volunteerCookie: string;

    beforeEach(async () => {
      volunteer = await createUser(app);
      volunteerCookie = await sessionCookie(volunteer);
      await setAllowlistStatus(app, setup.experimentId, volunteer, "approved");
    });

    async function optIn(email: string | null): Promise<Response> {
      return callRoute(putMyAlerts, "/api/v1/me/alerts", {
        method: "PUT",
        cookie: volunteerCookie,
        body: { email },
      });
    }

    it("is announced to the organizer and, when they asked, e-mailed to its owner with the reason", async () => {
      await subscribe(["node.dropped"]);
      const optedIn = await optIn("vera@example.org");
      expect(await optedIn.json()).toEqual({ email: "vera@example.org", available: true });
      const node = await joinNode(setup.experimentId, await createToken(app, setup.experimentId, volunteer));
      await accepted(node.peerId);
      await worker.tick();
      expect(types()).toEqual([]);

      clock += STALE_AFTER_MS + 1;
      await worker.tick();
      await worker.tick();
      expect(payloads()).toEqual([
        expect.objectContaining({
          type: "node.dropped",
          details: expect.objectContaining({
            node: node.peerId,
            owner: volunteer.username,
            reason: "stale",
          }) as unknown,
        }),
      ]);
      expect(mail.mails).toHaveLength(1);
      const [message] = mail.mails;
      expect(message?.to).toEqual(["vera@example.org"]);
      expect(message?.subject).toContain("stopped counting");
      expect(message?.subject).toContain(`Experiment ${setup.experimentId}`);
      expect(message?.text).toContain(node.peerId);
      expect(message?.text).toContain("reason: stale");
      expect(message?.text).toContain("has not been seen for over 2 minutes");

      // The volunteer's own e-mail is not in the organizer's log.
      const log = await callRoute(getAlerts, `${base()}/alerts`, {
        params: { id: setup.experimentId },
        cookie: organizerCookie,
      });
      const view = (await log.json()) as AlertSettingsView;
      expect(view.deliveries.map((delivery) => delivery.channel)).toEqual(["webhook"]);
    });

    it("is e-mailed to nobody who did not ask, and banning says so", async () => {
      await subscribe(["node.dropped"]);
      const node = await joinNode(setup.experimentId, await createToken(app, setup.experimentId, volunteer));
      await accepted(node.peerId);
      await worker.tick();
      await setAllowlistStatus(app, setup.experimentId, volunteer, "banned");
      await worker.tick();
      expect(payloads().map((payload) => payload.details.reason)).toEqual(["banned"]);
      expect(mail.mails).toEqual([]);
      const mine = await callRoute(getMyAlerts, "/api/v1/me/alerts", { cookie: volunteerCookie });
      expect(await mine.json()).toEqual({ email: null, available: true });
    });

    it("refuses an opt-in address that is not one", async () => {
      const response = await optIn("vera");
      expect(response.status).toBe(400);
    });
  });
});
