import type { MetricPoint } from "../../../src/api/schemas/public.ts";
import { formatCount, formatDecimal, formatTime } from "../format.ts";
import { describeNextStep, estimateNextStep } from "./eta.ts";
import { useNow } from "./use-live-dashboard.ts";

export interface NowFactsProps {
  /** The metric series, ascending by step. */
  readonly points: readonly MetricPoint[];
  readonly targetBatchSize: number;
  readonly everySteps: number;
  readonly paused: boolean;
  /** Unix milliseconds when the server rendered the page: the clock's first value. */
  readonly renderedAt: number;
}

/** The run at a glance: the latest step and the time to the next one, ticking every second. */
export function NowFacts({ points, targetBatchSize, everySteps, paused, renderedAt }: NowFactsProps) {
  const now = useNow(renderedAt);
  const latest = points.at(-1);
  const nextStep = paused ? "paused" : describeNextStep(estimateNextStep(points, now));
  return (
    <section aria-labelledby="now-heading" className="card stack" data-testid="dashboard-now">
      <h2 id="now-heading" className="card-title">
        Now
      </h2>
      {latest === undefined ? (
        <p className="muted">No training steps reported yet. Progress appears once peers train.</p>
      ) : (
        <dl className="facts">
          <div>
            <dt>Step</dt>
            <dd data-testid="now-step">{formatCount(latest.step)}</dd>
          </div>
          <div>
            <dt>Loss</dt>
            <dd data-testid="now-loss">{formatDecimal(latest.loss)}</dd>
          </div>
          <div>
            <dt>Samples/s</dt>
            <dd data-testid="now-throughput">{formatDecimal(latest.samplesPerSecond)}</dd>
          </div>
          <div>
            <dt>Peers alive</dt>
            <dd data-testid="now-peers">{formatCount(latest.alivePeers)}</dd>
          </div>
          <div>
            <dt>Next step</dt>
            <dd data-testid="now-eta">{nextStep}</dd>
          </div>
          <div>
            <dt>Last step at</dt>
            <dd>
              <time dateTime={latest.recordedAt}>{formatTime(latest.recordedAt)}</time>
            </dd>
          </div>
        </dl>
      )}
      <p className="hint">
        A step completes when the swarm has processed {formatCount(targetBatchSize)} samples; a checkpoint is
        saved every {formatCount(everySteps)} steps.
      </p>
    </section>
  );
}
