"use client";

import { useMemo } from "react";
import type { CheckpointList, Leaderboard, MetricSeries } from "../../../src/api/schemas/public.ts";
import { formatCount, formatDecimal } from "../format.ts";
import { toChartPoints, type ChartPoint } from "./chart-series.ts";
import { CheckpointTable } from "./checkpoint-table.tsx";
import { formatClock, formatInstant } from "./dashboard-format.ts";
import { LeaderboardTable } from "./leaderboard-table.tsx";
import { MetricChart } from "./metric-chart.tsx";
import { NowFacts } from "./now-facts.tsx";
import { POLL_INTERVAL_MS, useLiveDashboard } from "./use-live-dashboard.ts";

export interface ExperimentDashboardProps {
  readonly experimentId: string;
  /** What the server read, so the first paint shows the run without waiting for a poll. */
  readonly metrics: MetricSeries;
  readonly leaderboard: Leaderboard;
  readonly checkpoints: CheckpointList;
  readonly targetBatchSize: number;
  readonly everySteps: number;
  readonly paused: boolean;
  /** Unix milliseconds when the server rendered the page. */
  readonly renderedAt: number;
}

/**
 * The public, live view of a run: the latest step, the curves, the leaderboard and the checkpoints,
 * refreshed from the public API every few seconds while the page is visible.
 */
export function ExperimentDashboard(props: ExperimentDashboardProps) {
  const { experimentId, targetBatchSize, everySteps, paused, renderedAt } = props;
  const { data, failing, updatedAt } = useLiveDashboard(
    experimentId,
    { metrics: props.metrics, leaderboard: props.leaderboard, checkpoints: props.checkpoints },
    renderedAt,
  );
  const { points, total } = data.metrics;
  const chartPoints = useMemo(() => toChartPoints(points), [points]);
  const latest = chartPoints.at(-1);

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
        paused={paused}
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
            points={chartPoints}
            x="step"
            y="loss"
            yName="Loss"
            formatY={formatDecimal}
          />
          <MetricChart
            testId="chart-loss-time"
            title="Loss over time (UTC)"
            summary={latest === undefined ? null : `${formatDecimal(latest.loss)} at ${atClock(latest)}`}
            points={chartPoints}
            x="time"
            y="loss"
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
            points={chartPoints}
            x="time"
            y="samplesPerSecond"
            yName="Samples/s"
            formatY={formatDecimal}
          />
          <MetricChart
            testId="chart-peers"
            title="Peers alive"
            summary={latest === undefined ? null : `${formatCount(latest.alivePeers)} at ${atClock(latest)}`}
            points={chartPoints}
            x="time"
            y="alivePeers"
            yName="Peers alive"
            formatY={formatCount}
            counts
          />
        </div>
        {total > points.length ? (
          <p className="hint dashboard-note">
            The curves show {formatCount(points.length)} of {formatCount(total)} steps, chosen to keep the
            shape of the loss curve.
          </p>
        ) : null}
      </section>

      <LeaderboardTable entries={data.leaderboard.entries} />
      <CheckpointTable checkpoints={data.checkpoints.checkpoints} everySteps={everySteps} />
    </div>
  );
}

function atClock(point: ChartPoint): string {
  return `${formatClock(point.time)} UTC`;
}
