import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { testDatabaseProviders } from "@barnraise/prisma/testing";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { POST as postTest } from "../app/api/v1/experiments/[id]/alerts/test/route.ts";
import { POST as postWebhook } from "../app/api/v1/experiments/[id]/alerts/webhooks/route.ts";
import { GET as getAlerts, PUT as putAlerts } from "../app/api/v1/experiments/[id]/alerts/route.ts";
import type { AlertPayload } from "../src/server/alerts/alert-events.ts";
import {
  deliverDueAlerts,
  LEASE_MS,
  LOG_RETENTION_MS,
  MAX_ATTEMPTS,
  pruneAlertLog,
  RETRY_DELAYS_MS,
} from "../src/server/alerts/alert-outbox.ts";
import { enqueueAlert } from "../src/server/alerts/enqueue-alert.ts";
import { verifyWebhookSignature, webhookSignature } from "../src/server/alerts/webhook-signature.ts";
import { sendWebhook } from "../src/server/alerts/webhook-sender.ts";
import { createAppContext, type AppContext } from "../src/server/context.ts";
import type { AlertDeliveryView, AlertSettingsView } from "../src/server/services/read-alert-settings.ts";
import { createTestUser, type TestUser } from "./support/actors.ts";
import {
  startMailReceiver,
  startWebhookReceiver,
  type MailReceiver,
  type WebhookReceiver,
} from "./support/alert-receivers.ts";
import { createExperiment } from "./support/peer-fixtures.ts";
import { callRoute, createTestApp, type TestApp } from "./support/test-app.ts";

/**
 * Delivering alerts to real receivers on loopback: a webhook receiver that checks each signature, and
 * an SMTP server. Retries, the delivery log, "Send test", a restart, and two instances on one database.
 */

const MAIL_FROM = "Barnraise alerts <alerts@barnraise.test>";

describe.each(testDatabaseProviders())("alert delivery (%s)", (provider) => {
  let clock: number;
  let mail: MailReceiver;
  let hooks: WebhookReceiver;
  let app: TestApp;
  let organizer: TestUser;
  let experiment: { id: string; name: string };
  const others: AppContext[] = [];

  beforeEach(async () => {
    clock = Date.now();
    mail = await startMailReceiver();
    hooks = await startWebhookReceiver(() => clock);
    app = await createTestApp(provider, {
      now: () => clock,
      env: {
        BARNRAISE_SMTP_URL: mail.url,
        BARNRAISE_MAIL_FROM: MAIL_FROM,
        BARNRAISE_PUBLIC_URL: "https://barnraise.example.org",
        // The receivers run on this machine's loopback.
        BARNRAISE_WEBHOOK_PRIVATE_ADDRESSES: "allow",
      },
    });
    organizer = await createTestUser(app);
    experiment = await createExperiment(app, organizer);
  });
  afterEach(async () => {
    for (const ctx of others.splice(0)) await ctx.db.$disconnect();
    await app.dispose();
    await hooks.close();
    await mail.close();
  });

  const base = () => `/api/v1/experiments/${experiment.id}/alerts`;

  async function addWebhook(events: string[] = ["checkpoint.uploaded", "join.requested"]): Promise<string> {
    const response = await callRoute(postWebhook, `${base()}/webhooks`, {
      method: "POST",
      params: { id: experiment.id },
      cookie: organizer.cookie,
      body: { url: hooks.url, events },
    });
    const body = (await response.json()) as { webhook: { id: string }; secret: string };
    expect(response.status, JSON.stringify(body)).toBe(201);
    hooks.secret = body.secret;
    return body.webhook.id;
  }

  async function sendTest(input: unknown): Promise<{ status: number; deliveries: AlertDeliveryView[] }> {
    const response = await callRoute(postTest, `${base()}/test`, {
      method: "POST",
      params: { id: experiment.id },
      cookie: organizer.cookie,
      body: input,
    });
    const body = (await response.json()) as { deliveries: AlertDeliveryView[] };
    return { status: response.status, deliveries: body.deliveries };
  }

  async function settings(): Promise<AlertSettingsView> {
    const response = await callRoute(getAlerts, base(), {
      params: { id: experiment.id },
      cookie: organizer.cookie,
    });
    expect(response.status).toBe(200);
    return (await response.json()) as AlertSettingsView;
  }

  /**
   * Another platform instance on the same database: a restarted process, or a second web server.
   * `shared`: on SQLite, two clients of one file in one process would block each other's event loop
   * (the driver waits for the file lock synchronously), so a concurrent second instance there shares
   * the client, as two instances share the file; on PostgreSQL it has a connection pool of its own.
   */
  function otherInstance(options: { concurrent?: boolean } = {}): AppContext {
    const shared = options.concurrent === true && provider === "sqlite";
    const ctx = createAppContext(app.ctx.env, { now: () => clock, ...(shared ? { db: app.ctx.db } : {}) });
    if (!shared) others.push(ctx);
    return ctx;
  }

  function queueCheckpointAlert(ctx: AppContext = app.ctx): Promise<string[]> {
    return enqueueAlert(ctx, ctx.db, experiment, {
      type: "checkpoint.uploaded",
      summary: `${experiment.name} has a new checkpoint at step 7`,
      details: { step: 7 },
    });
  }

  it("signs the webhook, retries after a 500 with backoff, and logs each attempt", async () => {
    const webhookId = await addWebhook();
    hooks.statuses.push(500);

    const first = await sendTest({ webhookId });
    expect(first.status).toBe(200);
    expect(first.deliveries).toEqual([
      expect.objectContaining({
        event: "test",
        channel: "webhook",
        target: hooks.url,
        status: "pending",
        attempts: 1,
        lastResult: "HTTP 500: refused with 500",
        nextAttemptAt: new Date(clock + RETRY_DELAYS_MS[0]).toISOString(),
      }),
    ]);

    // Not due yet: nothing is sent.
    clock += RETRY_DELAYS_MS[0] - 1;
    expect(await deliverDueAlerts(app.ctx, "worker")).toBe(0);
    clock += 1;
    expect(await deliverDueAlerts(app.ctx, "worker")).toBe(1);

    expect(hooks.received.map((hook) => hook.answered)).toEqual([500, 204]);
    for (const hook of hooks.received) expect(hook.signature.ok).toBe(true);
    const [one, two] = hooks.received;
    expect(one?.headers["barnraise-delivery"]).toBe(first.deliveries[0]?.id);
    expect(two?.headers["barnraise-delivery"]).toBe(first.deliveries[0]?.id);
    expect(two?.headers["barnraise-event"]).toBe("test");
    expect(two?.headers["content-type"]).toBe("application/json");
    const payload = JSON.parse(two?.body ?? "") as AlertPayload;
    expect(payload).toMatchObject({
      type: "test",
      experiment: {
        id: experiment.id,
        name: experiment.name,
        url: `https://barnraise.example.org/experiments/${experiment.id}`,
      },
    });
    expect(one?.body).toBe(two?.body);

    const [logged] = (await settings()).deliveries;
    expect(logged).toMatchObject({
      status: "delivered",
      attempts: 2,
      lastResult: "HTTP 204",
      nextAttemptAt: null,
    });
    const attempts = await app.db.alertAttempt.findMany({
      where: { deliveryId: logged?.id },
      orderBy: { number: "asc" },
    });
    expect(attempts.map((attempt) => [attempt.number, attempt.ok, attempt.statusCode])).toEqual([
      [1, false, 500],
      [2, true, 204],
    ]);
    for (const attempt of attempts) expect(attempt.durationMs).toBeGreaterThanOrEqual(0);
    const counted = (await app.ctx.metrics.alertDeliveries.get()).values.map((sample) => [
      sample.labels.channel,
      sample.labels.outcome,
      sample.value,
    ]);
    expect(counted).toEqual(
      expect.arrayContaining([
        ["webhook", "retry", 1],
        ["webhook", "delivered", 1],
      ]),
    );
  });

  it("gives up after the last attempt and says so in the log", async () => {
    await addWebhook();
    hooks.statuses.push(...Array<number>(MAX_ATTEMPTS).fill(503));
    await queueCheckpointAlert();
    for (let attempt = 1; attempt <= MAX_ATTEMPTS; attempt += 1) {
      expect(await deliverDueAlerts(app.ctx, "worker")).toBe(1);
      clock += RETRY_DELAYS_MS[attempt - 1] ?? 0;
    }
    clock += 24 * 3600_000;
    expect(await deliverDueAlerts(app.ctx, "worker")).toBe(0);
    expect(hooks.received).toHaveLength(MAX_ATTEMPTS);
    const [logged] = (await settings()).deliveries;
    expect(logged).toMatchObject({
      status: "failed",
      attempts: MAX_ATTEMPTS,
      lastResult: "HTTP 503: refused with 503",
      nextAttemptAt: null,
    });
  });

  it("e-mails the recipients through the SMTP server", async () => {
    const put = await callRoute(putAlerts, base(), {
      method: "PUT",
      params: { id: experiment.id },
      cookie: organizer.cookie,
      body: { emailRecipients: ["ops@example.org", "ada@example.org"], emailEvents: ["checkpoint.uploaded"] },
    });
    expect(put.status).toBe(200);
    expect(((await put.json()) as AlertSettingsView).email).toEqual({
      available: true,
      recipients: ["ops@example.org", "ada@example.org"],
      events: ["checkpoint.uploaded"],
    });

    const test = await sendTest({ email: true });
    expect(test.status).toBe(200);
    expect(test.deliveries.map((delivery) => [delivery.target, delivery.status])).toEqual([
      ["ada@example.org", "delivered"],
      ["ops@example.org", "delivered"],
    ]);
    expect(mail.mails.map((message) => message.to).sort()).toEqual([
      ["ada@example.org"],
      ["ops@example.org"],
    ]);
    for (const message of mail.mails) {
      expect(message.from).toBe("alerts@barnraise.test");
      expect(message.subject).toBe(`[Barnraise] Test alert for ${experiment.name}: alerts reach you`);
      expect(message.text).toContain(`https://barnraise.example.org/experiments/${experiment.id}`);
    }

    await queueCheckpointAlert();
    expect(await deliverDueAlerts(app.ctx, "worker")).toBe(2);
    const checkpointMails = mail.mails.slice(2);
    expect(checkpointMails.map((message) => message.subject)).toEqual([
      `[Barnraise] ${experiment.name} has a new checkpoint at step 7`,
      `[Barnraise] ${experiment.name} has a new checkpoint at step 7`,
    ]);
    expect(checkpointMails[0]?.text).toContain("step: 7");
  });

  it("delivers what an earlier process queued or left half-sent, once a new one starts", async () => {
    await addWebhook();
    const [queued] = await queueCheckpointAlert();
    const [claimed] = await queueCheckpointAlert();
    // The first process claimed this one and died before sending it.
    await app.db.alertDelivery.update({
      where: { id: claimed },
      data: { leaseOwner: "dead-process", leaseUntil: new Date(clock + LEASE_MS) },
    });
    await app.ctx.db.$disconnect();

    const restarted = otherInstance();
    expect(await deliverDueAlerts(restarted, "restarted")).toBe(1);
    expect(hooks.accepted().map((hook) => hook.headers["barnraise-delivery"])).toEqual([queued]);
    clock += LEASE_MS + 1;
    expect(await deliverDueAlerts(restarted, "restarted")).toBe(1);
    expect(hooks.accepted().map((hook) => hook.headers["barnraise-delivery"])).toEqual([queued, claimed]);
    expect(await deliverDueAlerts(restarted, "restarted")).toBe(0);
  });

  it("two instances on one database deliver each alert once", async () => {
    await addWebhook();
    const second = otherInstance({ concurrent: true });
    const ids = (await Promise.all(Array.from({ length: 12 }, () => queueCheckpointAlert()))).flat();
    const [a, b] = await Promise.all([
      deliverDueAlerts(app.ctx, "instance-a"),
      deliverDueAlerts(second, "instance-b"),
    ]);
    expect(a + b).toBe(12);
    expect(hooks.received).toHaveLength(12);
    expect(new Set(hooks.received.map((hook) => hook.headers["barnraise-delivery"]))).toEqual(new Set(ids));
    const rows = await app.db.alertDelivery.findMany({ where: { id: { in: ids } } });
    for (const row of rows) expect([row.status, row.attempts]).toEqual(["delivered", 1]);
  });

  it("prunes finished deliveries after the retention time, never pending ones", async () => {
    await addWebhook();
    const [delivered] = await queueCheckpointAlert();
    expect(await deliverDueAlerts(app.ctx, "worker")).toBe(1);
    hooks.statuses.push(500);
    const [pending] = await queueCheckpointAlert();
    expect(await deliverDueAlerts(app.ctx, "worker")).toBe(1);
    clock += LOG_RETENTION_MS;
    expect(await pruneAlertLog(app.ctx)).toBe(0);
    clock += 1;
    expect(await pruneAlertLog(app.ctx)).toBe(1);
    const left = await app.db.alertDelivery.findMany({ select: { id: true } });
    expect(left.map((row) => row.id)).toEqual([pending]);
    expect(await app.db.alertAttempt.count({ where: { deliveryId: delivered } })).toBe(0);
  });

  it("by default sends no webhook to the platform's own network, and says why in the log", async () => {
    const guarded = await createTestApp(provider, { now: () => clock });
    try {
      const owner = await createTestUser(guarded);
      const run = await createExperiment(guarded, owner);
      const path = `/api/v1/experiments/${run.id}/alerts`;
      const results: string[] = [];
      // Loopback by address and by name, IPv6 loopback, a cloud metadata service, a private network.
      const port = new URL(hooks.url).port;
      for (const url of [
        hooks.url,
        `http://localhost:${port}/hook`,
        `http://[::1]:${port}/hook`,
        "http://169.254.169.254/latest/meta-data/",
        "http://10.20.30.40/hook",
      ]) {
        const added = await callRoute(postWebhook, `${path}/webhooks`, {
          method: "POST",
          params: { id: run.id },
          cookie: owner.cookie,
          body: { url, events: ["checkpoint.uploaded"] },
        });
        expect(added.status, url).toBe(201);
        const { webhook } = (await added.json()) as { webhook: { id: string } };
        const sent = await callRoute(postTest, `${path}/test`, {
          method: "POST",
          params: { id: run.id },
          cookie: owner.cookie,
          body: { webhookId: webhook.id },
        });
        const { deliveries } = (await sent.json()) as { deliveries: AlertDeliveryView[] };
        results.push(...deliveries.map((delivery) => delivery.lastResult ?? ""));
      }
      expect(results).toHaveLength(5);
      for (const result of results) {
        expect(result).toMatch(
          /^refused: .* is not a public address \(BARNRAISE_WEBHOOK_PRIVATE_ADDRESSES=allow/,
        );
      }
      expect(results[1]).toContain("localhost (");
      expect(hooks.received).toHaveLength(0);
    } finally {
      await guarded.dispose();
    }
  });

  it("queues no e-mail and refuses an e-mail test without an SMTP server", async () => {
    const plain = await createTestApp(provider, { now: () => clock });
    try {
      const owner = await createTestUser(plain);
      const run = await createExperiment(plain, owner);
      const path = `/api/v1/experiments/${run.id}/alerts`;
      const put = await callRoute(putAlerts, path, {
        method: "PUT",
        params: { id: run.id },
        cookie: owner.cookie,
        body: { emailRecipients: ["ops@example.org"], emailEvents: ["checkpoint.uploaded"] },
      });
      expect(((await put.json()) as AlertSettingsView).email.available).toBe(false);
      const test = await callRoute(postTest, `${path}/test`, {
        method: "POST",
        params: { id: run.id },
        cookie: owner.cookie,
        body: { email: true },
      });
      expect(test.status).toBe(409);
      expect(JSON.stringify(await test.json())).toMatch(/BARNRAISE_SMTP_URL/);
      expect(
        await enqueueAlert(plain.ctx, plain.db, run, {
          type: "checkpoint.uploaded",
          summary: "s",
          details: {},
        }),
      ).toEqual([]);
      expect(await plain.db.alertDelivery.count()).toBe(0);
    } finally {
      await plain.dispose();
    }
  });

  it("refuses webhook URLs that are not http(s), carry credentials or are too long", async () => {
    const cases = [
      "ftp://hooks.example.org/x",
      "https://user:secret@hooks.example.org/x",
      "not a url",
      `https://hooks.example.org/${"a".repeat(2000)}`,
    ];
    for (const url of cases) {
      const response = await callRoute(postWebhook, `${base()}/webhooks`, {
        method: "POST",
        params: { id: experiment.id },
        cookie: organizer.cookie,
        body: { url, events: ["run.stalled"] },
      });
      const body = (await response.json()) as { error: { code: string; issues: { path: string }[] } };
      expect(response.status, url).toBe(400);
      expect(body.error.issues[0]?.path).toBe("url");
    }
    const noEvents = await callRoute(postWebhook, `${base()}/webhooks`, {
      method: "POST",
      params: { id: experiment.id },
      cookie: organizer.cookie,
      body: { url: hooks.url, events: [] },
    });
    expect(noEvents.status).toBe(400);
  });

  it("keeps the webhook secret sealed and shows it only when the webhook is added", async () => {
    await addWebhook();
    const row = await app.db.alertWebhook.findFirstOrThrow({ where: { experimentId: experiment.id } });
    expect(row.sealedSecret).not.toContain(hooks.secret.slice(6));
    expect(JSON.stringify(await settings())).not.toContain(hooks.secret);
  });
});

describe("webhook signatures", () => {
  const secret = "whsec_test";
  const body = '{"type":"test"}';
  const now = 1_800_000_000;

  it("accepts the platform's signature and refuses any change", () => {
    const header = webhookSignature(secret, now, body);
    expect(verifyWebhookSignature(secret, header, body, now)).toEqual({ ok: true, time: now });
    expect(verifyWebhookSignature(secret, header, '{"type":"tast"}', now)).toEqual({
      ok: false,
      reason: "mismatch",
    });
    expect(verifyWebhookSignature("whsec_other", header, body, now)).toEqual({
      ok: false,
      reason: "mismatch",
    });
    const retimed = header.replace(`t=${now}`, `t=${now + 1}`);
    expect(verifyWebhookSignature(secret, retimed, body, now)).toEqual({ ok: false, reason: "mismatch" });
    expect(verifyWebhookSignature(secret, header, body, now + 301)).toEqual({ ok: false, reason: "expired" });
    for (const bad of [null, "", "t=1", "v1=00", `t=x,v1=${"0".repeat(64)}`]) {
      expect(verifyWebhookSignature(secret, bad, body, now)).toEqual({ ok: false, reason: "malformed" });
    }
  });
});

describe("webhook requests", () => {
  it("gives up on a receiver that does not answer in time, and follows no redirect", async () => {
    const server = createServer((req, res) => {
      if (req.url === "/redirect") {
        res.writeHead(302, { location: "/elsewhere" });
        res.end();
      }
      // Anything else is never answered.
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as AddressInfo;
    const request = {
      secret: "s",
      deliveryId: "d",
      event: "test",
      body: "{}",
      unixSeconds: 1,
      privateAddresses: "allow" as const,
    };
    try {
      expect(await sendWebhook({ ...request, url: `http://127.0.0.1:${port}/slow`, timeoutMs: 200 })).toEqual(
        {
          ok: false,
          statusCode: null,
          result: "timed out",
        },
      );
      expect(await sendWebhook({ ...request, url: `http://127.0.0.1:${port}/redirect` })).toEqual({
        ok: false,
        statusCode: 302,
        result: "HTTP 302",
      });
    } finally {
      server.closeAllConnections();
      await new Promise<void>((resolve) => {
        server.close(() => {
          resolve();
        });
      });
    }
  });
});
