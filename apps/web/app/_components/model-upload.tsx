"use client";

import { useState } from "react";
import { callApi, describeFailure, type ApiIssue } from "./api-client.ts";
import { formatCount } from "./format.ts";

/** What the platform says about an accepted model (POST /api/v1/models). */
export interface UploadedModel {
  readonly sha256: string;
  readonly inputShape: readonly number[];
  readonly outputUnits: number;
  readonly outputActivation: string;
  readonly parameters: number;
  readonly weightBytes: number;
  readonly layers: number;
}

type State =
  | { kind: "idle" }
  | { kind: "uploading" }
  | { kind: "accepted"; model: UploadedModel }
  | { kind: "refused"; message: string; issues: readonly ApiIssue[] };

/**
 * The organizer's own model: model.json and its weight shards, as tf.LayersModel.save() or
 * tensorflowjs_converter wrote them. The platform validates and stores them and answers with the
 * model's SHA-256, which the experiment's config then names; each problem is shown with its file.
 */
export function ModelUpload({
  sha256,
  onUploaded,
}: {
  readonly sha256: string;
  readonly onUploaded: (model: UploadedModel) => void;
}) {
  const [state, setState] = useState<State>({ kind: "idle" });

  async function upload(files: FileList | null) {
    if (files === null || files.length === 0) return;
    const form = new FormData();
    for (const file of Array.from(files)) form.append("files", file, file.name);
    setState({ kind: "uploading" });
    const result = await callApi<{ model: UploadedModel }>("POST", "/api/v1/models", form);
    if (!result.ok) {
      setState({ kind: "refused", message: describeFailure(result), issues: result.issues });
      return;
    }
    setState({ kind: "accepted", model: result.data.model });
    onUploaded(result.data.model);
  }

  return (
    <div className="field">
      <label htmlFor="model-files">Model files (model.json and its .bin weights)</label>
      <input
        id="model-files"
        type="file"
        multiple
        accept=".json,.bin,application/json,application/octet-stream"
        aria-describedby="model-files-hint model-files-status"
        onChange={(event) => void upload(event.target.files)}
      />
      <p id="model-files-hint" className="hint">
        A TensorFlow.js Layers model: what <code>model.save()</code> or <code>tensorflowjs_converter</code>{" "}
        writes. Choose model.json and every weights file together.
      </p>
      <div id="model-files-status" aria-live="polite">
        {state.kind === "uploading" ? <p className="notice notice-info">Checking the model…</p> : null}
        {state.kind === "refused" ? (
          <div role="alert" className="notice notice-error" data-testid="model-upload-error">
            <p>The model was not accepted.</p>
            <ul>
              {(state.issues.length > 0 ? state.issues : [{ path: "", message: state.message }]).map(
                (issue) => (
                  <li key={`${issue.path}:${issue.message}`}>
                    {issue.path === "" ? issue.message : `${issue.path}: ${issue.message}`}
                  </li>
                ),
              )}
            </ul>
          </div>
        ) : null}
        {state.kind === "accepted" ? (
          <p className="notice notice-ok" data-testid="model-upload-summary">
            Accepted: {state.model.layers} layers, {formatCount(state.model.parameters)} trainable parameters,
            input [{state.model.inputShape.join(", ")}], {state.model.outputUnits} outputs (
            {state.model.outputActivation}).
          </p>
        ) : null}
        {state.kind !== "accepted" && sha256 !== "" ? (
          <p className="hint">
            Current model: <code data-testid="model-sha256">{sha256.slice(0, 16)}…</code>
          </p>
        ) : null}
      </div>
    </div>
  );
}
