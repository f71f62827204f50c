import {
  CartesianGrid,
  Legend,
  Line,
  LineChart,
  ReferenceLine,
  ResponsiveContainer,
  Tooltip,
  XAxis,
  YAxis,
} from "recharts";
import { formatCount } from "../format.ts";
import { timeTickFormatter, type ChartAxis, type ChartSeries, type StepMarker } from "./chart-series.ts";
import { formatInstant } from "./dashboard-format.ts";

export const CHART_HEIGHT = 240;

/** A grey that reads on the light and the dark card alike, for the lines beside the main one. */
export const MUTED_LINE_COLOR = "#8c959f";
/** Discarded points are drawn in it. */
const DISCARDED_COLOR = MUTED_LINE_COLOR;
/** The legend's and the tooltip's name of the discarded series. */
export const DISCARDED_NAME = "discarded";

export interface MetricChartProps {
  /** `data-testid` of the figure. */
  readonly testId: string;
  readonly title: string;
  /** One sentence on the latest value, or null when there is none. */
  readonly summary: string | null;
  readonly series: ChartSeries;
  readonly x: ChartAxis;
  /** The live series' name in the tooltip and the legend. */
  readonly yName: string;
  readonly formatY: (value: number) => string;
  /** Peers come and go in whole numbers: draw them as steps from zero. */
  readonly counts?: boolean;
  /** Start the value axis at zero (a rate); counts always do. */
  readonly fromZero?: boolean;
  /** End the value axis here (a share: 1) instead of at the largest value. */
  readonly maxY?: number;
  /** What the figure says while it has no point to draw. */
  readonly empty?: string;
  /** Where the run restarted from an earlier step; only on a step axis. */
  readonly markers?: readonly StepMarker[];
}

/**
 * One metric as a line chart in a captioned figure; a sentence instead of an empty chart. Discarded
 * points are drawn grey and dashed under the name "discarded", and every restart of the run is a
 * labelled vertical line.
 */
export function MetricChart({
  testId,
  title,
  summary,
  series,
  x,
  yName,
  formatY,
  counts = false,
  fromZero = counts,
  maxY,
  empty = "No steps yet. The chart starts with the swarm’s first step.",
  markers = [],
}: MetricChartProps) {
  const { rows, livePoints, discarded } = series;
  const formatX = x === "step" ? formatCount : timeTickFormatter(rows);
  const discardedPoints = discarded.reduce((sum, segment) => sum + segment.points, 0);
  const shownMarkers = x === "step" ? markers : [];
  return (
    <figure
      className="card dashboard-chart"
      data-testid={testId}
      data-points={livePoints}
      data-discarded-points={discardedPoints}
      data-markers={shownMarkers.length}
    >
      <figcaption>
        <span className="dashboard-chart-title">{title}</span>
        {summary === null ? null : <span className="dashboard-chart-summary">{summary}</span>}
      </figcaption>
      {rows.length === 0 ? (
        <p className="dashboard-empty">{empty}</p>
      ) : (
        <div className="dashboard-chart-plot">
          <ResponsiveContainer width="100%" height={CHART_HEIGHT}>
            <LineChart data={[...rows]} margin={{ top: 8, right: 16, bottom: 0, left: 0 }}>
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
                domain={[fromZero ? 0 : "auto", maxY ?? "auto"]}
                allowDecimals={!counts}
                tickFormatter={(value: number) => formatY(value)}
              />
              <Tooltip
                isAnimationActive={false}
                labelFormatter={(label) =>
                  x === "step" ? `Step ${formatCount(Number(label))}` : formatInstant(Number(label))
                }
                formatter={(value, name) => [formatY(Number(value)), name]}
                contentStyle={{ background: "var(--card)", borderColor: "var(--border)", color: "var(--fg)" }}
              />
              {discardedPoints > 0 ? <Legend /> : null}
              {shownMarkers.map((marker, index) => (
                <ReferenceLine
                  key={`${marker.step}-${index}`}
                  x={marker.step}
                  stroke="currentColor"
                  strokeDasharray="2 3"
                  ifOverflow="extendDomain"
                  label={{
                    value: marker.label,
                    position: "insideTopLeft",
                    fill: "currentColor",
                    fontSize: 11,
                    // Markers close together would print over each other: stagger their labels.
                    dy: (index % 3) * 14,
                  }}
                />
              ))}
              {discarded.map((segment, index) => (
                <Line
                  key={segment.key}
                  dataKey={segment.key}
                  name={DISCARDED_NAME}
                  // One legend entry for all discarded timelines.
                  legendType={index === 0 ? "plainline" : "none"}
                  type={counts ? "stepAfter" : "linear"}
                  stroke={DISCARDED_COLOR}
                  strokeWidth={1.5}
                  strokeDasharray="5 4"
                  connectNulls
                  dot={segment.points === 1}
                  isAnimationActive={false}
                />
              ))}
              <Line
                dataKey="live"
                name={yName}
                legendType="plainline"
                type={counts ? "stepAfter" : "linear"}
                stroke="currentColor"
                strokeWidth={2}
                connectNulls
                dot={livePoints === 1}
                isAnimationActive={false}
              />
            </LineChart>
          </ResponsiveContainer>
        </div>
      )}
    </figure>
  );
}
