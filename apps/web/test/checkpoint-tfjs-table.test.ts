import { createElement } from "react";
import { renderToStaticMarkup } from "react-dom/server";
import { describe, expect, it } from "vitest";
import { CheckpointTable } from "../app/_components/dashboard/checkpoint-table.tsx";
import type { CheckpointView } from "../src/api/schemas/public.ts";

/**
 * The checkpoint table's exports as the page renders them on the server: a TF.js link per row and a
 * JavaScript snippet beside the Python one, for every model but ALBERT's (whose view has no TF.js
 * URL); the test ids the training story uses stay.
 */

function checkpoint(step: number, tfjs: boolean): CheckpointView {
  const downloadUrl = `/api/v1/experiments/demo/checkpoints/c${step}`;
  return {
    id: `c${step}`,
    step,
    loss: 0.5,
    sizeBytes: 1000,
    sha256: String(step % 10).repeat(64),
    generation: 0,
    timeline: 0,
    createdAt: "2026-11-21T10:00:00.000Z",
    downloadUrl,
    safetensorsUrl: `${downloadUrl}/safetensors`,
    tfjsUrl: tfjs ? `${downloadUrl}/tfjs/model.json` : null,
    evaluation: null,
  };
}

describe("checkpoint table", () => {
  it("links each checkpoint's TF.js model and shows how to load the newest in JavaScript", () => {
    const html = renderToStaticMarkup(
      createElement(CheckpointTable, {
        checkpoints: [checkpoint(200, true), checkpoint(100, true)],
        everySteps: 100,
      }),
    );
    expect(html.match(/data-testid="checkpoint-row"/g)).toHaveLength(2);
    expect(html.match(/data-testid="checkpoint-safetensors"/g)).toHaveLength(2);
    expect(html).toContain(
      'href="/api/v1/experiments/demo/checkpoints/c200/tfjs/model.json" data-testid="checkpoint-tfjs"',
    );
    expect(html).toContain(
      'href="/api/v1/experiments/demo/checkpoints/c100/tfjs/model.json" data-testid="checkpoint-tfjs"',
    );
    expect(html).toContain('data-testid="checkpoint-load-snippet"');
    expect(html).toContain("load_file");
    expect(html).toContain('data-testid="checkpoint-tfjs-snippet"');
    // On the server the URL is the path; the browser puts its origin in front once hydrated.
    expect(html).toContain(
      "const model = await tf.loadLayersModel(&quot;/api/v1/experiments/demo/checkpoints/c200/tfjs/model.json&quot;);",
    );
  });

  it("has no TF.js link or snippet for a model without a TF.js form", () => {
    const html = renderToStaticMarkup(
      createElement(CheckpointTable, { checkpoints: [checkpoint(300, false)], everySteps: 100 }),
    );
    expect(html).toContain('data-testid="checkpoint-safetensors"');
    expect(html).toContain("load_file");
    expect(html).not.toContain("checkpoint-tfjs");
    expect(html).not.toContain("loadLayersModel");
  });
});
