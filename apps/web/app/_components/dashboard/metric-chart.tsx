import { CartesianGrid, Line, LineChart, ResponsiveContainer, Tooltip, XAxis, YAxis } from "recharts";
import { formatCount } from "../format.ts";
import { timeTickFormatter, type ChartPoint } from "./chart-series.ts";
import { formatInstant } from "./dashboard-format.ts";

export const CHART_HEIGHT = 240;

export interface MetricChartProps {
  /** `data-testid` of the figure. */
  readonly testId: string;
  readonly title: string;
  /** One sentence on the latest value, or null when there is none. */
  readonly summary: string | null;
  readonly points: readonly ChartPoint[];
  readonly x: "step" | "time";
  readonly y: "loss" | "samplesPerSecond" | "alivePeers";
  /** The series' name in the tooltip. */
  readonly yName: string;
  readonly formatY: (value: number) => string;
  /** Peers come and go in whole numbers: draw them as steps from zero. */
  readonly counts?: boolean;
}

/** One metric as a line chart in a captioned figure; a sentence instead of an empty chart. */
export function MetricChart({
  testId,
  title,
  summary,
  points,
  x,
  y,
  yName,
  formatY,
  counts = false,
}: MetricChartProps) {
  const formatX = x === "step" ? formatCount : timeTickFormatter(points);
  return (
    <figure className="card dashboard-chart" data-testid={testId} data-points={points.length}>
      <figcaption>
        <span className="dashboard-chart-title">{title}</span>
        {summary === null ? null : <span className="dashboard-chart-summary">{summary}</span>}
      </figcaption>
      {points.length === 0 ? (
        <p className="dashboard-empty">No steps yet. The chart starts with the swarm’s first step.</p>
      ) : (
        <div className="dashboard-chart-plot">
          <ResponsiveContainer width="100%" height={CHART_HEIGHT}>
            <LineChart data={[...points]} margin={{ top: 8, right: 16, bottom: 0, left: 0 }}>
              <CartesianGrid strokeDasharray="3 3" />
              <XAxis
                dataKey={x}
                type="number"
                scale={x === "time" ? "time" : "linear"}
                domain={["dataMin", "dataMax"]}
                tickFormatter={(value: number) => formatX(value)}
                minTickGap={24}
              />
              <YAxis
                width={56}
                domain={counts || y === "samplesPerSecond" ? [0, "auto"] : ["auto", "auto"]}
                allowDecimals={!counts}
                tickFormatter={(value: number) => formatY(value)}
              />
              <Tooltip
                isAnimationActive={false}
                labelFormatter={(label) =>
                  x === "step" ? `Step ${formatCount(Number(label))}` : formatInstant(Number(label))
                }
                formatter={(value) => [formatY(Number(value)), yName]}
                contentStyle={{ background: "var(--card)", borderColor: "var(--border)", color: "var(--fg)" }}
              />
              <Line
                dataKey={y}
                name={yName}
                type={counts ? "stepAfter" : "linear"}
                stroke="currentColor"
                strokeWidth={2}
                dot={points.length === 1}
                isAnimationActive={false}
              />
            </LineChart>
          </ResponsiveContainer>
        </div>
      )}
    </figure>
  );
}
