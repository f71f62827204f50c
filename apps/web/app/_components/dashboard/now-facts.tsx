import { AveragingStrategy, type ExperimentConfig } from "@barnraise/protocol";
import type { MetricPoint } from "../../../src/api/schemas/public.ts";
import { strategyNames } from "../config-names.ts";
import { formatCount, formatDecimal, formatTime } from "../format.ts";
import { latestLivePoint, livePointsByStep } from "./chart-series.ts";
import { describeNextStep, nextStepState } from "./eta.ts";
import type { RunState } from "./live-data.ts";
import { useNow } from "./use-live-dashboard.ts";

export interface NowFactsProps {
  /** The metric series, every timeline's points. */
  readonly points: readonly MetricPoint[];
  /** Whether the run is paused, and the live swarm. */
  readonly run: RunState;
  readonly targetBatchSize: number;
  readonly everySteps: number;
  readonly strategy: ExperimentConfig["averaging"]["strategy"];
  /** Unix milliseconds when the server rendered the page: the clock's first value. */
  readonly renderedAt: number;
}

/**
 * The run at a glance: the latest live step, the swarm as its aux peer last reported it, and the time
 * to the next step (ticking every second), or why no step is coming: the organizer paused the run, or
 * no volunteer is training.
 */
export function NowFacts({ points, run, targetBatchSize, everySteps, strategy, renderedAt }: NowFactsProps) {
  const now = useNow(renderedAt);
  const latest = latestLivePoint(points);
  const nextStep = describeNextStep(nextStepState(run, livePointsByStep(points), now));
  return (
    <section aria-labelledby="now-heading" className="card stack" data-testid="dashboard-now">
      <h2 id="now-heading" className="card-title">
        Now
      </h2>
      {latest === undefined ? (
        <p className="muted">No training steps reported yet. Progress appears once peers train.</p>
      ) : null}
      {run.swarm.split === null ? null : (
        <p className="swarm-split" role="alert" data-testid="swarm-split">
          <strong>The swarm has split:</strong> {run.swarm.split.summary}. Its volunteers train more than one
          model since {formatTime(run.swarm.split.since)}; the aux peer keeps watching, and the peers that are
          cut off say why in their status line.
        </p>
      )}
      <dl className="facts">
        {latest === undefined ? null : (
          <>
            <div>
              <dt>Step</dt>
              <dd data-testid="now-step">{formatCount(latest.step)}</dd>
            </div>
            <div>
              <dt>Loss</dt>
              <dd data-testid="now-loss">{formatDecimal(latest.loss)}</dd>
            </div>
          </>
        )}
        <div>
          <dt>Samples/s</dt>
          <dd data-testid="now-throughput">{formatDecimal(run.swarm.samplesPerSecond)}</dd>
        </div>
        <div>
          <dt>Peers alive</dt>
          <dd data-testid="now-peers">{formatCount(run.swarm.alivePeers)}</dd>
        </div>
        <div>
          <dt>Averaging</dt>
          <dd data-testid="now-strategy">{strategyNames[strategy]}</dd>
        </div>
        <div>
          <dt>Next step</dt>
          <dd data-testid="now-eta">{nextStep}</dd>
        </div>
        {latest === undefined ? null : (
          <div>
            <dt>Last step at</dt>
            <dd>
              <time dateTime={latest.recordedAt}>{formatTime(latest.recordedAt)}</time>
            </dd>
          </div>
        )}
      </dl>
      <p className="hint">
        {stepSentence(strategy, targetBatchSize)}; a checkpoint is saved every {formatCount(everySteps)}{" "}
        steps.
      </p>
    </section>
  );
}

/** What one step of the run is, under its averaging strategy. */
function stepSentence(strategy: NowFactsProps["strategy"], targetBatchSize: number): string {
  const samples = formatCount(targetBatchSize);
  return strategy === AveragingStrategy.diloco
    ? `A step is one round: the peers take local steps until the swarm has trained on ${samples} samples, then average and all take one outer step`
    : `A step completes when the swarm has processed ${samples} samples`;
}
