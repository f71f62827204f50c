import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";

/**
 * The platform's Prometheus metrics (prom-client), one registry per app context: routes count what
 * they served, services what they did, and `GET /metrics` fills the run gauges from the database
 * and writes the text format. Every metric is listed in docs/metrics.md.
 */

/** Latency buckets in seconds, from a cached read (1 ms) to a large upload's request (30 s). */
const SECONDS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

export class PlatformMetrics {
  readonly registry = new Registry();
  /** Every API request a route answered, by route pattern (e.g. /api/v1/experiments/{id}), method and status. */
  readonly httpRequests = new Counter({
    name: "barnraise_http_requests_total",
    help: "API requests answered, by route pattern, method and status code",
    labelNames: ["route", "method", "status"] as const,
    registers: [this.registry],
  });
  readonly httpDuration = new Histogram({
    name: "barnraise_http_request_duration_seconds",
    help: "Time to answer an API request, by route pattern and method",
    labelNames: ["route", "method"] as const,
    buckets: SECONDS,
    registers: [this.registry],
  });
  /** Joins and pass refreshes: `outcome` is "admitted" or "refused", `code` the refusal's error code. */
  readonly joins = new Counter({
    name: "barnraise_joins_total",
    help: "Join requests (and pass refreshes) answered, by outcome and refusal code",
    labelNames: ["outcome", "code"] as const,
    registers: [this.registry],
  });
  readonly ingestion = new Histogram({
    name: "barnraise_metrics_ingestion_seconds",
    help: "Time to verify and store one signed metrics report from an aux peer",
    buckets: SECONDS,
    registers: [this.registry],
  });
  readonly dbQuery = new Histogram({
    name: "barnraise_db_query_seconds",
    help: 'Database query latency, by model and operation (raw SQL: model "raw")',
    labelNames: ["model", "operation"] as const,
    buckets: SECONDS,
    registers: [this.registry],
  });
  readonly uploads = new Counter({
    name: "barnraise_uploads_total",
    help: "Files accepted, by kind: checkpoint, model, dataset",
    labelNames: ["kind"] as const,
    registers: [this.registry],
  });
  readonly uploadBytes = new Counter({
    name: "barnraise_upload_bytes_total",
    help: "Bytes of the files accepted, by kind: checkpoint, model, dataset",
    labelNames: ["kind"] as const,
    registers: [this.registry],
  });
  readonly activeRuns = new Gauge({
    name: "barnraise_active_runs",
    help: "Experiments whose swarm has at least one alive peer (per the aux's last heartbeat)",
    registers: [this.registry],
  });
  readonly alivePeers = new Gauge({
    name: "barnraise_alive_peers",
    help: "Alive trainers of each running experiment, per the aux's last heartbeat",
    labelNames: ["experiment"] as const,
    registers: [this.registry],
  });

  /** Alert delivery attempts: `channel` webhook or email, `outcome` delivered, retry or failed. */
  readonly alertDeliveries = new Counter({
    name: "barnraise_alert_deliveries_total",
    help: "Alert delivery attempts, by channel (webhook, email) and outcome (delivered, retry, failed)",
    labelNames: ["channel", "outcome"] as const,
    registers: [this.registry],
  });

  constructor() {
    collectDefaultMetrics({ register: this.registry, prefix: "barnraise_web_" });
  }

  /** Seconds since `startedAt` (from `performance.now()`). */
  static since(startedAt: number): number {
    return (performance.now() - startedAt) / 1000;
  }
}

/**
 * A request's route pattern from its path and the route's params: each segment equal to a param's
 * value becomes `{name}` (catch-all params cover several segments), so one route is one label
 * whatever the ids in its path.
 */
export function routePattern(pathname: string, params: Readonly<Record<string, unknown>>): string {
  const names = new Map<string, string>();
  for (const [name, value] of Object.entries(params)) {
    for (const part of Array.isArray(value) ? value : [value]) {
      if (typeof part === "string" && part.length > 0) names.set(part, name);
    }
  }
  return pathname
    .split("/")
    .map((segment) => {
      let decoded = segment;
      try {
        decoded = decodeURIComponent(segment);
      } catch {
        // Not percent-encoded as it should be: compared as it is.
      }
      const name = names.get(decoded);
      return name === undefined ? segment : `{${name}}`;
    })
    .join("/");
}
