import { createElement } from "react";
import { renderToStaticMarkup } from "react-dom/server";
import { describe, expect, it } from "vitest";
import { CheckpointTable } from "../app/_components/dashboard/checkpoint-table.tsx";
import { EvaluationChart } from "../app/_components/dashboard/evaluation-chart.tsx";
import { evaluationSeries, formatEvaluation } from "../app/_components/dashboard/evaluation-series.ts";
import type { CheckpointEvaluationView, CheckpointView } from "../src/api/schemas/public.ts";

// The checkpoints' held-out evaluation on the dashboard: the chart's points by step, its empty
// state, and the checkpoint table's column.

function checkpoint(
  step: number,
  evaluation: Omit<CheckpointEvaluationView, "evaluatedAt"> | null,
  options: { timeline?: number; createdAt?: string } = {},
): CheckpointView {
  const downloadUrl = `/api/v1/experiments/demo/checkpoints/c${step}`;
  const createdAt = options.createdAt ?? new Date(Date.UTC(2026, 10, 21, 10, 0, step)).toISOString();
  return {
    id: `c${step}-${options.timeline ?? 0}`,
    step,
    loss: 0.5,
    sizeBytes: 1000,
    sha256: String(step % 10).repeat(64),
    generation: 0,
    timeline: options.timeline ?? 0,
    createdAt,
    downloadUrl,
    safetensorsUrl: `${downloadUrl}/safetensors`,
    tfjsUrl: null,
    evaluation: evaluation === null ? null : { ...evaluation, evaluatedAt: createdAt },
  };
}

const accuracy = (value: number, loss = 0.4) => ({ metric: "accuracy" as const, value, loss, samples: 500 });

describe("evaluationSeries", () => {
  it("has a point per evaluated checkpoint, ascending by step, and no metric when none was evaluated", () => {
    expect(evaluationSeries([])).toEqual({ metric: null, points: [] });
    expect(evaluationSeries([checkpoint(10, null)])).toEqual({ metric: null, points: [] });
    const series = evaluationSeries([
      checkpoint(30, accuracy(0.9, 0.3)),
      checkpoint(20, null),
      checkpoint(10, accuracy(0.6, 1.2)),
    ]);
    expect(series.metric).toBe("accuracy");
    expect(series.points).toEqual([
      { step: 10, value: 0.6, loss: 1.2, samples: 500, timeline: 0 },
      { step: 30, value: 0.9, loss: 0.3, samples: 500, timeline: 0 },
    ]);
  });

  it("keeps the newest checkpoint's metric when the model changed", () => {
    const perplexity = { metric: "perplexity" as const, value: 40, loss: Math.log(40), samples: 900 };
    const series = evaluationSeries([
      checkpoint(10, accuracy(0.5), { createdAt: "2026-11-21T10:00:00.000Z" }),
      checkpoint(10, perplexity, { timeline: 1, createdAt: "2026-11-21T11:00:00.000Z" }),
      checkpoint(5, { ...perplexity, value: 80 }, { timeline: 0, createdAt: "2026-11-21T10:30:00.000Z" }),
    ]);
    expect(series.metric).toBe("perplexity");
    expect(series.points.map((point) => [point.step, point.timeline, point.value])).toEqual([
      [5, 0, 80],
      [10, 1, 40],
    ]);
  });

  it("leaves out the points a later timeline went back over, keeping the shared history", () => {
    // Timeline 0 reached step 30; a rollback to step 10 started timeline 1 (checkpoints 20, 30).
    const series = evaluationSeries([
      checkpoint(10, accuracy(0.5)),
      checkpoint(20, accuracy(0.6)),
      checkpoint(30, accuracy(0.4)),
      checkpoint(20, accuracy(0.65), { timeline: 1 }),
      checkpoint(30, accuracy(0.7), { timeline: 1 }),
    ]);
    expect(series.points.map((point) => [point.step, point.timeline, point.value])).toEqual([
      [10, 0, 0.5],
      [20, 1, 0.65],
      [30, 1, 0.7],
    ]);
  });
});

describe("formatEvaluation", () => {
  it("shows an accuracy as a percentage and the other metrics as decimals", () => {
    expect(formatEvaluation({ metric: "accuracy", value: 0.9123 })).toBe("accuracy 91.2 %");
    expect(formatEvaluation({ metric: "perplexity", value: 48.3149 })).toBe("perplexity 48.31");
    expect(formatEvaluation({ metric: "mae", value: 0.123456 })).toBe("MAE 0.1235");
  });
});

describe("EvaluationChart", () => {
  it("says no checkpoint was evaluated yet instead of drawing an empty chart", () => {
    const html = renderToStaticMarkup(
      createElement(EvaluationChart, { series: evaluationSeries([checkpoint(10, null)]) }),
    );
    expect(html).toContain('data-testid="chart-evaluation"');
    expect(html).toContain('data-points="0"');
    expect(html).toContain("No checkpoint evaluated yet");
    expect(html).not.toContain("data-metric");
  });

  it("names the metric and the latest point in its caption and data attributes", () => {
    const html = renderToStaticMarkup(
      createElement(EvaluationChart, {
        series: evaluationSeries([checkpoint(10, accuracy(0.6)), checkpoint(20, accuracy(0.875))]),
      }),
    );
    expect(html).toContain('data-points="2"');
    expect(html).toContain('data-metric="accuracy"');
    expect(html).toContain('data-latest-step="20"');
    expect(html).toContain('data-latest-value="0.875"');
    expect(html).toContain("accuracy 87.5 % at step 20");
    expect(html).not.toContain("No checkpoint evaluated yet");
  });
});

describe("checkpoint table", () => {
  it("has a held-out column: the score where the aux evaluated the checkpoint, a dash elsewhere", () => {
    const html = renderToStaticMarkup(
      createElement(CheckpointTable, {
        checkpoints: [checkpoint(20, null), checkpoint(10, accuracy(0.8125, 0.61))],
        everySteps: 10,
      }),
    );
    expect(html).toContain(">Held-out</th>");
    const cells = [...html.matchAll(/data-testid="checkpoint-evaluation"><span title="([^"]*)">([^<]*)</g)];
    expect(cells.map((cell) => [cell[1], cell[2]])).toEqual([
      ["not evaluated yet", "—"],
      ["held-out loss 0.61 over 500 predictions", "accuracy 81.3 %"],
    ]);
  });
});
