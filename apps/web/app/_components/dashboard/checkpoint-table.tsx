"use client";

import { useSyncExternalStore } from "react";
import type { CheckpointView } from "../../../src/api/schemas/public.ts";
import { formatBytes, formatCount, formatDecimal, formatTime } from "../format.ts";
import { formatEvaluation } from "./evaluation-series.ts";

/**
 * The saved checkpoints, newest first, each with its held-out score, its full SHA-256, a download
 * link, its weights as safetensors and (for every model but ALBERT's) as a TF.js Layers model.
 */
export function CheckpointTable({
  checkpoints,
  everySteps,
}: {
  readonly checkpoints: readonly CheckpointView[];
  readonly everySteps: number;
}) {
  return (
    <section aria-labelledby="checkpoints-heading" className="section">
      <h2 id="checkpoints-heading">Checkpoints</h2>
      {checkpoints.length === 0 ? (
        <p className="muted">
          No checkpoints yet. The organizer’s aux peer uploads one every {formatCount(everySteps)} steps.
        </p>
      ) : (
        <div className="table-wrap dashboard-table-wrap">
          <table data-testid="checkpoints" className="dashboard-table">
            <thead>
              <tr>
                <th scope="col" className="num">
                  Step
                </th>
                <th scope="col" className="num">
                  Loss
                </th>
                <th scope="col" className="num">
                  Held-out
                </th>
                <th scope="col" className="num">
                  Size
                </th>
                <th scope="col">SHA-256</th>
                <th scope="col">Saved</th>
                <th scope="col">
                  <span className="visually-hidden">Download</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {checkpoints.map((checkpoint) => (
                <tr
                  key={checkpoint.id}
                  data-testid="checkpoint-row"
                  data-sha256={checkpoint.sha256}
                  data-step={checkpoint.step}
                >
                  <td className="num">{formatCount(checkpoint.step)}</td>
                  <td className="num">{checkpoint.loss === null ? "—" : formatDecimal(checkpoint.loss)}</td>
                  <td className="num" data-testid="checkpoint-evaluation">
                    <EvaluationCell evaluation={checkpoint.evaluation} />
                  </td>
                  <td className="num">{formatBytes(checkpoint.sizeBytes)}</td>
                  <td>
                    {/* Shortened on screen; the whole hash stays in the text, selectable, and shows on focus. */}
                    <code className="dashboard-sha" title={checkpoint.sha256} tabIndex={0}>
                      {checkpoint.sha256}
                    </code>
                  </td>
                  <td>
                    <time dateTime={checkpoint.createdAt}>{formatTime(checkpoint.createdAt)}</time>
                  </td>
                  <td>
                    <a href={checkpoint.downloadUrl} download>
                      Download
                      <span className="visually-hidden"> the checkpoint of step {checkpoint.step}</span>
                    </a>{" "}
                    ·{" "}
                    <a href={checkpoint.safetensorsUrl} download data-testid="checkpoint-safetensors">
                      safetensors
                      <span className="visually-hidden"> weights of step {checkpoint.step}</span>
                    </a>
                    {checkpoint.tfjsUrl === null ? null : (
                      <>
                        {" "}
                        ·{" "}
                        <a href={checkpoint.tfjsUrl} data-testid="checkpoint-tfjs">
                          TF.js
                          <span className="visually-hidden"> model of step {checkpoint.step}</span>
                        </a>
                      </>
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
          <LoadSnippet checkpoint={checkpoints[0]} />
        </div>
      )}
    </section>
  );
}

/** The checkpoint's held-out score, its loss and sample count on hover; a dash until the aux scored it. */
function EvaluationCell({ evaluation }: { readonly evaluation: CheckpointView["evaluation"] }) {
  if (evaluation === null) return <span title="not evaluated yet">—</span>;
  return (
    <span
      title={`held-out loss ${formatDecimal(evaluation.loss)} over ${formatCount(evaluation.samples)} predictions`}
    >
      {formatEvaluation(evaluation)}
    </span>
  );
}

/**
 * How to use the newest checkpoint's weights elsewhere: its safetensors file, read in Python, and
 * (where the model has one) its TF.js model, loaded in JavaScript.
 */
function LoadSnippet({ checkpoint }: { readonly checkpoint: CheckpointView | undefined }) {
  const origin = usePageOrigin();
  if (checkpoint === undefined) return null;
  return (
    <div data-testid="checkpoint-load-snippet">
      <p className="muted">
        To use the latest weights elsewhere,{" "}
        <a href={checkpoint.safetensorsUrl} download>
          download step {formatCount(checkpoint.step)} as safetensors
        </a>{" "}
        (one named float32 tensor per weight, kernels as [inputs, outputs]) and load it, e.g. in Python:
      </p>
      <pre>
        <code>{`from safetensors.numpy import load_file
weights = load_file("${safetensorsFilename(checkpoint)}")
print({name: w.shape for name, w in weights.items()})`}</code>
      </pre>
      {checkpoint.tfjsUrl === null ? null : (
        <div data-testid="checkpoint-tfjs-snippet">
          <p className="muted">
            Or load{" "}
            <a href={checkpoint.tfjsUrl}>step {formatCount(checkpoint.step)} as a TensorFlow.js model</a> (its
            model.json; the weights, weights.bin, lie beside it) in JavaScript, in the browser or Node.js:
          </p>
          <pre>
            <code>{`import * as tf from "@tensorflow/tfjs";
const model = await tf.loadLayersModel("${origin}${checkpoint.tfjsUrl}");`}</code>
          </pre>
        </div>
      )}
    </div>
  );
}

/**
 * The origin the page was loaded from, so the snippet names an absolute URL that works where the
 * reader is (behind whatever proxy). Empty while rendering on the server and hydrating (a relative
 * URL), then the browser's.
 */
function usePageOrigin(): string {
  return useSyncExternalStore(
    subscribeToNothing,
    () => window.location.origin,
    () => "",
  );
}

function subscribeToNothing(): () => void {
  return () => {};
}

/** The name the download gets (the server's Content-Disposition): `<experiment>-step-<step>.safetensors`. */
function safetensorsFilename(checkpoint: CheckpointView): string {
  // …/experiments/{id}/checkpoints/{checkpointId}/safetensors
  const experiment = decodeURIComponent(checkpoint.safetensorsUrl.split("/").at(-4) ?? "");
  return `${experiment}-step-${checkpoint.step}.safetensors`;
}
