import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";
import type { MetricsServer, SwarmMetrics } from "../metrics/swarm-metrics.ts";
import type { NodeMetrics } from "../session/node-session.ts";

/**
 * A node's metrics (see `SwarmMetrics`) in Prometheus metrics (prom-client), which the peer and aux
 * programs serve with `--metrics-port`. Every metric is listed in docs/metrics.md.
 */

/** Averaging steps take from milliseconds (a small model on loopback) to minutes (a large one on a slow link). */
const ALLREDUCE_SECONDS = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];

export class PrometheusMetrics implements SwarmMetrics {
  readonly registry = new Registry();
  readonly step = new Gauge({
    name: "barnraise_step",
    help: "The collaborative step this node is at (the run's, for an aux)",
    registers: [this.registry],
  });
  readonly samplesPerSecond = new Gauge({
    name: "barnraise_samples_per_second",
    help: "Training samples per second: this peer's own, or the whole swarm's for an aux",
    registers: [this.registry],
  });
  readonly allreduceSeconds = new Histogram({
    name: "barnraise_allreduce_seconds",
    help: "Time of each successful averaging step (matchmaking and every Moshpit round)",
    buckets: ALLREDUCE_SECONDS,
    registers: [this.registry],
  });
  readonly allreduceBytes = new Counter({
    name: "barnraise_allreduce_bytes_total",
    help: "All-reduce payload bytes, by direction: sent or received",
    labelNames: ["direction"] as const,
    registers: [this.registry],
  });
  readonly averagingFailures = new Counter({
    name: "barnraise_averaging_failures_total",
    help: "Averaging steps that failed, by reason (the swarm error code; other for anything else)",
    labelNames: ["reason"] as const,
    registers: [this.registry],
  });
  readonly peerExclusions = new Counter({
    name: "barnraise_peer_excluded_total",
    help: "Peers this node's reducer left out of an all-reduce round, by reason: non-finite, timeout, malformed or failed",
    labelNames: ["reason"] as const,
    registers: [this.registry],
  });
  readonly stateDownloads = new Counter({
    name: "barnraise_state_downloads_total",
    help: "Downloads of the swarm's state from other nodes, by outcome: ok or failed",
    labelNames: ["outcome"] as const,
    registers: [this.registry],
  });
  readonly stateDownloadBytes = new Counter({
    name: "barnraise_state_download_bytes_total",
    help: "Bytes of the states downloaded from other nodes",
    registers: [this.registry],
  });
  readonly passExpiry = new Gauge({
    name: "barnraise_pass_expiry_timestamp_seconds",
    help: "When this node's access pass expires (Unix time); it refreshes the pass before then",
    registers: [this.registry],
  });
  readonly peersOnline = new Gauge({
    name: "barnraise_peers_online",
    help: "Trainers this node sees alive in the swarm",
    registers: [this.registry],
  });

  #processMetrics = false;

  /**
   * Adds prom-client's process metrics (CPU, memory, event loop lag, GC) as `barnraise_node_*`:
   * for a program that serves the registry. Not by default, since they observe the whole process
   * and a test may run many swarms in one. Idempotent.
   */
  collectProcessMetrics(): void {
    if (this.#processMetrics) return;
    this.#processMetrics = true;
    collectDefaultMetrics({ register: this.registry, prefix: "barnraise_node_" });
  }
}

/**
 * Serves `registry` at `GET /metrics` on `host:port` (loopback by default: point a local
 * Prometheus or node exporter proxy at it; give --metrics-host to expose it). Rejects when the port
 * cannot be taken, with the reason.
 */
export async function startMetricsServer(options: {
  readonly registry: Registry;
  readonly port: number;
  readonly host?: string;
}): Promise<MetricsServer> {
  const { registry } = options;
  const host = options.host ?? "127.0.0.1";
  const server: Server = createServer((req, res) => {
    const path = new URL(req.url ?? "/", "http://metrics").pathname;
    if (req.method !== "GET" || path !== "/metrics") {
      res.writeHead(404, { "content-type": "text/plain" }).end("GET /metrics\n");
      return;
    }
    registry.metrics().then(
      (text) => {
        res.writeHead(200, { "content-type": registry.contentType, "cache-control": "no-store" }).end(text);
      },
      (error: unknown) => {
        res.writeHead(500, { "content-type": "text/plain" }).end(`${String(error)}\n`);
      },
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", (error: NodeJS.ErrnoException) => {
      reject(new Error(`cannot serve metrics on ${host}:${options.port}: ${error.code ?? error.message}`));
    });
    server.listen(options.port, host, () => {
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const shownHost = address.family === "IPv6" ? `[${address.address}]` : address.address;
  return {
    url: `http://${shownHost}:${address.port}/metrics`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => {
          resolve();
        });
        server.closeAllConnections();
      }),
  };
}

/**
 * The Node programs' metrics: Prometheus, served at http://host:port/metrics with the process's
 * own metrics when `served` is given (`--metrics-port`), kept unserved otherwise.
 */
export function prometheusNodeMetrics(served?: {
  readonly port: number;
  readonly host: string;
}): NodeMetrics {
  const meters = new PrometheusMetrics();
  if (served === undefined) return { meters };
  return {
    meters,
    serve: () => {
      meters.collectProcessMetrics();
      return startMetricsServer({ registry: meters.registry, ...served });
    },
  };
}
