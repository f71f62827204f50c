import { readFile } from "node:fs/promises";
import { createServer } from "node:net";
import { describe, expect, it } from "vitest";
import { Scrape } from "../../../../apps/web/test/support/prometheus.ts";
import { parseMetricsPort } from "../../src/node/cli-support.ts";
import { SwarmError, SwarmErrorCode } from "../../src/errors.ts";
import { countAveragingFailure } from "../../src/metrics/swarm-metrics.ts";
import { PrometheusMetrics, startMetricsServer } from "../../src/node/prometheus-metrics.ts";

/**
 * A node's metrics endpoint (`--metrics-port`): the registry served at GET /metrics on loopback,
 * read back by the reference Prometheus parser; every metric documented in docs/metrics.md.
 */

describe("PrometheusMetrics and its server", () => {
  it("serves the registry at /metrics on loopback, and nothing else", async () => {
    const metrics = new PrometheusMetrics();
    metrics.collectProcessMetrics();
    metrics.collectProcessMetrics();
    metrics.step.set(12);
    metrics.allreduceSeconds.observe(0.25);
    metrics.allreduceBytes.inc({ direction: "sent" }, 1000);
    countAveragingFailure(metrics, new SwarmError(SwarmErrorCode.NO_GROUP, "no group"));
    countAveragingFailure(metrics, new Error("something else"));
    const server = await startMetricsServer({ registry: metrics.registry, port: 0 });
    try {
      expect(server.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
      const response = await fetch(server.url);
      expect(response.headers.get("content-type")).toMatch(/^text\/plain; version=0\.0\.4/);
      const scrape = await Scrape.parse(await response.text());
      expect(scrape.value("barnraise_step")).toBe(12);
      expect(scrape.value("barnraise_allreduce_seconds_count")).toBe(1);
      expect(scrape.value("barnraise_allreduce_seconds_bucket", { le: "0.25" })).toBe(1);
      expect(scrape.value("barnraise_allreduce_bytes_total", { direction: "sent" })).toBe(1000);
      expect(scrape.value("barnraise_averaging_failures_total", { reason: "NO_GROUP" })).toBe(1);
      expect(scrape.value("barnraise_averaging_failures_total", { reason: "other" })).toBe(1);
      expect(scrape.value("barnraise_node_process_resident_memory_bytes")).toBeGreaterThan(0);
      const other = await fetch(new URL("/", server.url));
      expect(other.status).toBe(404);
      const post = await fetch(server.url, { method: "POST" });
      expect(post.status).toBe(404);
    } finally {
      await server.close();
    }
  });

  it("says which port it could not take", async () => {
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, "127.0.0.1", resolve));
    const port = (taken.address() as { port: number }).port;
    try {
      await expect(startMetricsServer({ registry: new PrometheusMetrics().registry, port })).rejects.toThrow(
        `cannot serve metrics on 127.0.0.1:${port}: EADDRINUSE`,
      );
    } finally {
      taken.close();
    }
  });

  it("documents every metric it registers in docs/metrics.md", async () => {
    const docs = await readFile(new URL("../../../../docs/metrics.md", import.meta.url), "utf8");
    const names = (await new PrometheusMetrics().registry.getMetricsAsJSON())
      .map((metric) => metric.name)
      .filter((name) => !name.startsWith("barnraise_node_"));
    expect(names.length).toBeGreaterThan(5);
    for (const name of names) expect(docs, name).toContain(`\`${name}\``);
  });

  it("reads --metrics-port: a TCP port, 0 for any free one; anything else is a usage error", () => {
    expect(parseMetricsPort(undefined)).toBeUndefined();
    expect(parseMetricsPort("9464")).toBe(9464);
    expect(parseMetricsPort("0")).toBe(0);
    for (const bad of ["", " ", "-1", "65536", "80.5", "http", "0x50"]) {
      expect(() => parseMetricsPort(bad), bad).toThrow(/--metrics-port must be a TCP port from 0 to 65535/);
    }
  });
});
