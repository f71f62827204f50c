import {
  CartesianGrid,
  Legend,
  Line,
  LineChart,
  ResponsiveContainer,
  Tooltip,
  XAxis,
  YAxis,
  type DotItemDotProps,
} from "recharts";
import { HeldOutMetric } from "@barnraise/protocol";
import { formatCount, formatDecimal } from "../format.ts";
import {
  formatMetricValue,
  metricName,
  type EvaluationPoint,
  type EvaluationSeries,
} from "./evaluation-series.ts";
import { CHART_HEIGHT, MUTED_LINE_COLOR } from "./metric-chart.tsx";

/** The legend's and the tooltip's name of the held-out loss line. */
export const HELD_OUT_LOSS_NAME = "held-out loss";

/**
 * The checkpoints' held-out evaluation by step: the metric the model is judged by (left axis) and
 * the held-out loss (right axis, grey and dashed), one point per evaluated checkpoint. The figure
 * carries the count and the latest point as data attributes, and each point of the metric is a
 * circle with `data-testid="evaluation-point"` and its step and value, for the end-to-end tests.
 */
export function EvaluationChart({ series }: { readonly series: EvaluationSeries }) {
  const { metric, points } = series;
  const latest = points.at(-1);
  return (
    <figure
      className="card dashboard-chart"
      data-testid="chart-evaluation"
      data-points={points.length}
      data-metric={metric ?? undefined}
      data-latest-step={latest?.step}
      data-latest-value={latest?.value}
    >
      <figcaption>
        <span className="dashboard-chart-title">Held-out evaluation</span>
        {metric === null || latest === undefined ? null : (
          <span className="dashboard-chart-summary">
            {metricName(metric)} {formatMetricValue(metric, latest.value)} at step {formatCount(latest.step)}
          </span>
        )}
      </figcaption>
      {metric === null ? (
        <p className="dashboard-empty">
          No checkpoint evaluated yet. The organizer’s aux peer scores each checkpoint on the dataset’s test
          split.
        </p>
      ) : (
        <EvaluationPlot metric={metric} points={points} />
      )}
    </figure>
  );
}

function EvaluationPlot({
  metric,
  points,
}: {
  readonly metric: HeldOutMetric;
  readonly points: readonly EvaluationPoint[];
}) {
  const formatValue = (value: number) => formatMetricValue(metric, value);
  const name = metricName(metric);
  return (
    <div className="dashboard-chart-plot">
      <ResponsiveContainer width="100%" height={CHART_HEIGHT}>
        <LineChart data={[...points]} margin={{ top: 8, right: 0, bottom: 0, left: 0 }}>
          <CartesianGrid strokeDasharray="3 3" />
          <XAxis
            dataKey="step"
            type="number"
            domain={["dataMin", "dataMax"]}
            tickFormatter={(value: number) => formatCount(value)}
            minTickGap={24}
          />
          <YAxis
            yAxisId="metric"
            width={56}
            domain={metric === HeldOutMetric.accuracy ? [0, 1] : ["auto", "auto"]}
            tickFormatter={formatValue}
          />
          <YAxis
            yAxisId="loss"
            orientation="right"
            width={48}
            domain={["auto", "auto"]}
            tickFormatter={(value: number) => formatDecimal(value)}
          />
          <Tooltip
            isAnimationActive={false}
            labelFormatter={(label) => `Checkpoint of step ${formatCount(Number(label))}`}
            formatter={(value, seriesName) => [
              seriesName === HELD_OUT_LOSS_NAME ? formatDecimal(Number(value)) : formatValue(Number(value)),
              seriesName,
            ]}
            contentStyle={{ background: "var(--card)", borderColor: "var(--border)", color: "var(--fg)" }}
          />
          <Legend />
          <Line
            yAxisId="metric"
            dataKey="value"
            name={name}
            legendType="plainline"
            stroke="currentColor"
            strokeWidth={2}
            dot={EvaluationDot}
            isAnimationActive={false}
          />
          <Line
            yAxisId="loss"
            dataKey="loss"
            name={HELD_OUT_LOSS_NAME}
            legendType="plainline"
            stroke={MUTED_LINE_COLOR}
            strokeWidth={1.5}
            strokeDasharray="5 4"
            dot={false}
            isAnimationActive={false}
          />
        </LineChart>
      </ResponsiveContainer>
    </div>
  );
}

/** A point of the metric line, findable by tests: its checkpoint's step and value as data attributes. */
function EvaluationDot(props: DotItemDotProps) {
  const { cx, cy, index } = props;
  const point = props.payload as EvaluationPoint;
  if (typeof cx !== "number" || typeof cy !== "number") return null;
  return (
    <circle
      key={`evaluation-point-${index}`}
      cx={cx}
      cy={cy}
      r={3}
      fill="currentColor"
      data-testid="evaluation-point"
      data-step={point.step}
      data-value={point.value}
    />
  );
}
