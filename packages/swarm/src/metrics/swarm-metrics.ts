import { isSwarmError } from "../errors.ts";

/**
 * What a node measures about itself (DESIGN §11): the swarm engine records averaging and state
 * downloads here, and the programs set the training gauges. The Node programs keep them in
 * Prometheus metrics they can serve (`PrometheusMetrics` in `@barnraise/swarm/node`; every metric is
 * listed in docs/metrics.md); a node that serves none records nothing (`silentMetrics`).
 */
export interface SwarmMetrics {
  /** The collaborative step this node is at (the run's, for an aux). */
  readonly step: GaugeMeter;
  /** Training samples per second: this peer's own, or the whole swarm's for an aux. */
  readonly samplesPerSecond: GaugeMeter;
  /** Time of each successful averaging step, in seconds. */
  readonly allreduceSeconds: HistogramMeter;
  /** All-reduce payload bytes, by direction. */
  readonly allreduceBytes: CounterMeter<"direction", "sent" | "received">;
  /** Averaging steps that failed, by reason (the swarm error code, or "other"). */
  readonly averagingFailures: CounterMeter<"reason">;
  /** Peers this node's reducer left out of a round, by reason. */
  readonly peerExclusions: CounterMeter<"reason">;
  /** Downloads of the swarm's state from other nodes, by outcome. */
  readonly stateDownloads: CounterMeter<"outcome", "ok" | "failed">;
  /** Bytes of the states downloaded from other nodes. */
  readonly stateDownloadBytes: { inc(value?: number): void };
  /** When this node's access pass expires (Unix time, seconds). */
  readonly passExpiry: GaugeMeter;
  /** Trainers this node sees alive in the swarm. */
  readonly peersOnline: GaugeMeter;
}

export interface GaugeMeter {
  set(value: number): void;
}

export interface HistogramMeter {
  observe(value: number): void;
}

/** A counter with one label. */
export interface CounterMeter<Label extends string, Value extends string = string> {
  inc(labels: Readonly<Record<Label, Value>>, value?: number): void;
}

/** Where a program serves its metrics (the Node programs' `--metrics-port`). */
export interface MetricsServer {
  /** The address it listens on, e.g. http://127.0.0.1:9464/metrics. */
  readonly url: string;
  close(): Promise<void>;
}

/** Counts a failed averaging step under its reason. */
export function countAveragingFailure(metrics: SwarmMetrics, error: unknown): void {
  metrics.averagingFailures.inc({ reason: isSwarmError(error) ? error.code : "other" });
}

/** Metrics that record nothing, for a node that serves none. */
export function silentMetrics(): SwarmMetrics {
  const gauge: GaugeMeter = { set: () => undefined };
  const counter = { inc: () => undefined };
  return {
    step: gauge,
    samplesPerSecond: gauge,
    allreduceSeconds: { observe: () => undefined },
    allreduceBytes: counter,
    averagingFailures: counter,
    peerExclusions: counter,
    stateDownloads: counter,
    stateDownloadBytes: counter,
    passExpiry: gauge,
    peersOnline: gauge,
  };
}
