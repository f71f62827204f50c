"use client";

import type { ExperimentConfig } from "@barnraise/protocol";
import { useMemo } from "react";
import type { CheckpointList, Leaderboard, MetricSeries } from "../../../src/api/schemas/public.ts";
import { formatBytes, formatCount, formatDecimal, formatPercent } from "../format.ts";
import {
  buildSeries,
  latestLivePoint,
  latestReported,
  stepMarkers,
  toChartPoints,
  type ChartPoint,
} from "./chart-series.ts";
import { CheckpointTable } from "./checkpoint-table.tsx";
import { formatClock, formatInstant } from "./dashboard-format.ts";
import { EvaluationChart } from "./evaluation-chart.tsx";
import { evaluationSeries } from "./evaluation-series.ts";
import { LeaderboardTable } from "./leaderboard-table.tsx";
import type { RunState } from "./live-data.ts";
import { MetricChart } from "./metric-chart.tsx";
import { NowFacts } from "./now-facts.tsx";
import { describeRunEvent } from "./run-events.ts";
import { POLL_INTERVAL_MS, useLiveDashboard } from "./use-live-dashboard.ts";

export interface ExperimentDashboardProps {
  readonly experimentId: string;
  /** What the server read, so the first paint shows the run without waiting for a poll. */
  readonly metrics: MetricSeries;
  readonly leaderboard: Leaderboard;
  readonly checkpoints: CheckpointList;
  readonly targetBatchSize: number;
  readonly everySteps: number;
  readonly strategy: ExperimentConfig["averaging"]["strategy"];
  /** Whether the run is paused, and the live swarm, from the experiment's public view. */
  readonly run: RunState;
  /** Unix milliseconds when the server rendered the page. */
  readonly renderedAt: number;
}

/**
 * The public, live view of a run: the latest step, the curves (the held-out evaluation of the
 * checkpoints next to the training loss), the leaderboard and the checkpoints, refreshed from the
 * public API every few seconds while the page is visible.
 */
export function ExperimentDashboard(props: ExperimentDashboardProps) {
  const { experimentId, targetBatchSize, everySteps, strategy, renderedAt } = props;
  const { data, failing, updatedAt } = useLiveDashboard(
    experimentId,
    {
      run: props.run,
      metrics: props.metrics,
      leaderboard: props.leaderboard,
      checkpoints: props.checkpoints,
    },
    renderedAt,
  );
  const { points, total, events } = data.metrics;
  const charts = useMemo(() => {
    const chartPoints = toChartPoints(points);
    return {
      latest: latestLivePoint(chartPoints),
      lossByStep: buildSeries(chartPoints, "step", "loss", { splitDiscarded: true }),
      lossByTime: buildSeries(chartPoints, "time", "loss", { splitDiscarded: true }),
      throughput: buildSeries(chartPoints, "time", "samplesPerSecond", { splitDiscarded: false }),
      peers: buildSeries(chartPoints, "time", "alivePeers", { splitDiscarded: false }),
      bytesPerPeer: buildSeries(chartPoints, "step", "bytesPerPeer", { splitDiscarded: true }),
      latestBytesPerPeer: latestReported(chartPoints, "bytesPerPeer"),
      utilization: buildSeries(chartPoints, "step", "utilization", { splitDiscarded: true }),
      latestUtilization: latestReported(chartPoints, "utilization"),
      samples: buildSeries(chartPoints, "step", "samples", { splitDiscarded: true }),
      latestSamples: latestReported(chartPoints, "samples"),
    };
  }, [points]);
  const markers = useMemo(() => stepMarkers(events), [events]);
  const evaluation = useMemo(() => evaluationSeries(data.checkpoints.checkpoints), [data.checkpoints]);
  const { latest, latestBytesPerPeer, latestUtilization, latestSamples } = charts;
  /** Why a chart of a metric that older aux programs leave out is empty although steps are recorded. */
  const notReported = (what: string) =>
    points.length === 0
      ? undefined
      : `The aux peer reports no ${what} for the recorded steps (older versions do not).`;

  return (
    <div className="dashboard" data-testid="experiment-dashboard">
      <p className="dashboard-status" role="status">
        {failing ? (
          <span className="dashboard-status-failed" data-testid="dashboard-update-failed">
            Updating failed, retrying. Showing data from {formatInstant(updatedAt)}.
          </span>
        ) : (
          <span className="muted">Live: updates every {POLL_INTERVAL_MS / 1000} s.</span>
        )}
      </p>

      <NowFacts
        points={points}
        targetBatchSize={targetBatchSize}
        everySteps={everySteps}
        strategy={strategy}
        run={data.run}
        renderedAt={renderedAt}
      />

      <section aria-labelledby="curves-heading" className="section">
        <h2 id="curves-heading">Training curves</h2>
        <div className="dashboard-charts">
          <MetricChart
            testId="chart-loss-step"
            title="Loss by step"
            summary={
              latest === undefined
                ? null
                : `${formatDecimal(latest.loss)} at step ${formatCount(latest.step)}`
            }
            series={charts.lossByStep}
            x="step"
            yName="Loss"
            formatY={formatDecimal}
            markers={markers}
          />
          <EvaluationChart series={evaluation} />
          <MetricChart
            testId="chart-loss-time"
            title="Loss over time (UTC)"
            summary={latest === undefined ? null : `${formatDecimal(latest.loss)} at ${atClock(latest)}`}
            series={charts.lossByTime}
            x="time"
            yName="Loss"
            formatY={formatDecimal}
          />
          <MetricChart
            testId="chart-throughput"
            title="Swarm throughput, samples/s"
            summary={
              latest === undefined
                ? null
                : `${formatDecimal(latest.samplesPerSecond)} samples/s at ${atClock(latest)}`
            }
            series={charts.throughput}
            x="time"
            yName="Samples/s"
            formatY={formatDecimal}
            fromZero
          />
          <MetricChart
            testId="chart-peers"
            title="Peers alive"
            summary={latest === undefined ? null : `${formatCount(latest.alivePeers)} at ${atClock(latest)}`}
            series={charts.peers}
            x="time"
            yName="Peers alive"
            formatY={formatCount}
            counts
          />
          <MetricChart
            testId="chart-bytes-per-peer"
            title="Bytes sent per peer per step"
            summary={
              latestBytesPerPeer === undefined
                ? null
                : `${formatBytes(latestBytesPerPeer.value)} at step ${formatCount(latestBytesPerPeer.step)}`
            }
            series={charts.bytesPerPeer}
            x="step"
            yName="Sent per peer"
            formatY={formatBytes}
            fromZero
            markers={markers}
            empty={notReported("bytes sent")}
          />
          <MetricChart
            testId="chart-utilization"
            title="Compute utilization"
            summary={
              latestUtilization === undefined
                ? null
                : `${formatPercent(latestUtilization.value)} at step ${formatCount(latestUtilization.step)}`
            }
            series={charts.utilization}
            x="step"
            yName="Utilization"
            formatY={formatPercent}
            fromZero
            maxY={1}
            markers={markers}
            empty={notReported("utilization")}
          />
          <MetricChart
            testId="chart-step-samples"
            title="Samples per step"
            summary={
              latestSamples === undefined
                ? null
                : `${formatCount(Math.round(latestSamples.value))} at step ${formatCount(latestSamples.step)}${
                    strategy === "dedloc" ? ` (target batch ${formatCount(targetBatchSize)})` : ""
                  }`
            }
            series={charts.samples}
            x="step"
            yName="Samples"
            formatY={formatCount}
            counts
            fromZero
            markers={markers}
            empty={
              points.length === 0
                ? undefined
                : "The aux peer reduced no part of the recorded steps' rounds (it helps whole-swarm rounds, not Moshpit grids), so it cannot vouch for their samples."
            }
          />
        </div>
        {total > points.length ? (
          <p className="hint dashboard-note">
            The curves show {formatCount(points.length)} of {formatCount(total)} steps, chosen to keep the
            shape of the loss curve.
          </p>
        ) : null}
        {events.length > 0 ? (
          <div className="hint dashboard-note">
            <p>{restartsSentence(events.length)}</p>
            <ul data-testid="run-events">
              {events.slice(-RECENT_EVENTS).map((event, index) => (
                <li key={`${event.timeline}-${index}`}>{describeRunEvent(event)}</li>
              ))}
            </ul>
          </div>
        ) : null}
      </section>

      <LeaderboardTable entries={data.leaderboard.entries} />
      <CheckpointTable checkpoints={data.checkpoints.checkpoints} everySteps={everySteps} />
    </div>
  );
}

/** How many of the latest restarts the list under the charts names. */
const RECENT_EVENTS = 10;

function restartsSentence(count: number): string {
  const times = count === 1 ? "once" : `${count} times`;
  return `The run restarted from an earlier step ${times}; the steps it no longer builds on are drawn grey and dashed.`;
}

function atClock(point: ChartPoint): string {
  return `${formatClock(point.time)} UTC`;
}
