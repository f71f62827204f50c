import { readFile } from "node:fs/promises";
import { generateKeyPair, parseExperimentConfig, toBase64Url } from "@barnraise/protocol";
import { testDatabaseProviders } from "@barnraise/prisma/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GET as metricsRoute } from "../app/metrics/route.ts";
import { GET as experimentRoute } from "../app/api/v1/experiments/[id]/route.ts";
import { POST as joinRoute } from "../app/api/v1/join/route.ts";
import { POST as uploadModelRoute } from "../app/api/v1/models/route.ts";
import { PlatformMetrics } from "../src/server/observability/platform-metrics.ts";
import { createExperiment } from "../src/server/services/create-experiment.ts";
import { createTestUser, type TestUser } from "./support/actors.ts";
import { multipartOf, savedLayersModel } from "./support/layers-fixture.ts";
import { Scrape } from "./support/prometheus.ts";
import { callRoute, createTestApp, type TestApp } from "./support/test-app.ts";

/**
 * The platform's Prometheus endpoint (`GET /metrics`): off without BARNRAISE_METRICS_TOKEN, 401
 * without the right bearer secret, and with it a scrape that a real text-format parser reads, whose
 * counters moved with the requests this test made.
 */

const TOKEN = "metrics-secret-0123456789abcdef";

describe.each(testDatabaseProviders())("GET /metrics (%s)", (provider) => {
  let app: TestApp;
  let organizer: TestUser;

  beforeAll(async () => {
    app = await createTestApp(provider, { env: { BARNRAISE_METRICS_TOKEN: TOKEN } });
    organizer = await createTestUser(app);
  });
  afterAll(async () => {
    await app.dispose();
  });

  const scrape = async (): Promise<Scrape> => {
    const response = await callRoute(metricsRoute, "/metrics", {
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toMatch(/^text\/plain; version=0\.0\.4/);
    return Scrape.parse(await response.text());
  };

  it("refuses a scraper without the bearer secret, or with another one", async () => {
    for (const authorization of [undefined, "Bearer wrong-secret-0123456789abcd", `Basic ${TOKEN}`, TOKEN]) {
      const response = await callRoute(metricsRoute, "/metrics", {
        headers: authorization === undefined ? {} : { authorization },
      });
      expect(response.status, authorization).toBe(401);
      expect(response.headers.get("www-authenticate")).toBe('Bearer realm="metrics"');
      expect(await response.text()).not.toContain("barnraise_");
    }
  });

  it("counts requests by route pattern and status, joins by refusal code, and database queries", async () => {
    const before = await scrape();
    const refusedBefore =
      before.value("barnraise_joins_total", { outcome: "refused", code: "TOKEN_INVALID" }) ?? 0;
    const join = await callRoute(joinRoute, "/api/v1/join", {
      method: "POST",
      body: { token: "brp_not-a-token", publicKey: toBase64Url(generateKeyPair().publicKey) },
    });
    const missing = await callRoute(experimentRoute, "/api/v1/experiments/no-such-run", {
      params: { id: "no-such-run" },
    });
    expect(missing.status).toBe(404);

    const after = await scrape();
    expect(
      after.value("barnraise_http_requests_total", {
        route: "/api/v1/join",
        method: "POST",
        status: String(join.status),
      }),
    ).toBeGreaterThanOrEqual(1);
    // The id in the path is the route's parameter, not a label value of its own.
    expect(
      after.value("barnraise_http_requests_total", {
        route: "/api/v1/experiments/{id}",
        method: "GET",
        status: "404",
      }),
    ).toBe(1);
    expect(
      after
        .samples("barnraise_http_requests_total")
        .some((sample) => sample.labels.route?.includes("no-such-run")),
    ).toBe(false);
    expect(join.status).toBe(401);
    expect(after.value("barnraise_joins_total", { outcome: "refused", code: "TOKEN_INVALID" })).toBe(
      refusedBefore + 1,
    );
    expect(
      after.value("barnraise_http_request_duration_seconds_count", { route: "/api/v1/experiments/{id}" }),
    ).toBe(1);
    expect(after.sum("barnraise_db_query_seconds_count", { model: "Experiment" })).toBeGreaterThan(
      before.sum("barnraise_db_query_seconds_count", { model: "Experiment" }),
    );
    expect(after.value("barnraise_web_process_resident_memory_bytes")).toBeGreaterThan(0);
  });

  it("counts uploads and their bytes, and the alive peers of each running experiment", async () => {
    const { files } = await savedLayersModel({ inputs: 4, hidden: 8, classes: 3 });
    const { body, contentType } = await multipartOf(files);
    const uploaded = await callRoute(uploadModelRoute, "/api/v1/models", {
      method: "POST",
      body,
      cookie: organizer.cookie,
      headers: { "content-type": contentType },
    });
    expect(uploaded.status).toBe(201);

    const running = await createExperiment(app.ctx, organizer, {
      id: `metrics-${provider}`,
      name: "Metrics",
      config: parseExperimentConfig({}),
    });
    await app.db.experiment.update({
      where: { id: running.id },
      data: { swarmSeenAt: new Date(app.ctx.now()), swarmAlivePeers: 3 },
    });
    const stale = await createExperiment(app.ctx, organizer, {
      id: `metrics-stale-${provider}`,
      name: "Metrics, stale",
      config: parseExperimentConfig({}),
    });
    await app.db.experiment.update({
      where: { id: stale.id },
      data: { swarmSeenAt: new Date(app.ctx.now() - 3_600_000), swarmAlivePeers: 5 },
    });

    const scraped = await scrape();
    expect(scraped.value("barnraise_uploads_total", { kind: "model" })).toBe(1);
    expect(scraped.value("barnraise_upload_bytes_total", { kind: "model" })).toBe(body.byteLength);
    expect(scraped.value("barnraise_alive_peers", { experiment: running.id })).toBe(3);
    // A heartbeat an hour old counts no one, as on the public page.
    expect(scraped.value("barnraise_alive_peers", { experiment: stale.id })).toBeUndefined();
    expect(scraped.value("barnraise_active_runs")).toBe(1);
  });
});

describe("GET /metrics without BARNRAISE_METRICS_TOKEN", () => {
  it("is off, and says how to turn it on", async () => {
    const app = await createTestApp("sqlite");
    try {
      const response = await callRoute(metricsRoute, "/metrics", {
        headers: { authorization: "Bearer anything-at-all-0123456789" },
      });
      expect(response.status).toBe(404);
      expect(JSON.stringify(await response.json())).toContain("set BARNRAISE_METRICS_TOKEN");
    } finally {
      await app.dispose();
    }
  });
});

describe("docs/metrics.md", () => {
  it("documents every metric the platform registers", async () => {
    const docs = await readFile(new URL("../../../docs/metrics.md", import.meta.url), "utf8");
    const names = (await new PlatformMetrics().registry.getMetricsAsJSON())
      .map((metric) => metric.name)
      .filter((name) => !name.startsWith("barnraise_web_"));
    expect(names.length).toBeGreaterThan(5);
    for (const name of names) expect(docs, name).toContain(`\`${name}\``);
  });
});
