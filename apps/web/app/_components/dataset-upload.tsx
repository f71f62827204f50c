"use client";

import { useEffect, useRef, useState } from "react";
import { Upload, type DetailedError } from "tus-js-client";
import { callApi, describeFailure } from "./api-client.ts";
import { FieldError } from "./field-error.tsx";
import { formatBytes, formatCount } from "./format.ts";

/**
 * An organizer's own dataset: a CSV table, a zip archive of images (one folder per class) or plain
 * text, uploaded with the tus protocol (resumable: after a reload or a dropped connection, choosing
 * the same file again sends only what the platform lacks), then converted on the platform into a
 * `tabular-f32`, `image-u8` or `tokens-u16le` dataset. Shows the upload's and then the conversion's
 * progress, and in the end the dataset's records or what was wrong with the file.
 */

const UPLOADS_PATH = "/api/v1/uploads";
const IMPORTS_PATH = "/api/v1/datasets/imports";
const NAME_PATTERN = /^[a-z0-9][a-z0-9-]{0,63}$/;
/** Bytes per PATCH request: a retry after a dropped connection resends at most this much. */
const CHUNK_BYTES = 32 * 1024 * 1024;
const POLL_MS = 1000;

type Format = "csv" | "images" | "text";

/** What each kind of file is called, accepts, and counts its records as. */
const FORMATS: Record<
  Format,
  {
    readonly option: string;
    readonly label: string;
    readonly accept: string;
    readonly hint: string;
    readonly unit: string;
  }
> = {
  csv: {
    option: "CSV table",
    label: "Dataset file (CSV)",
    accept: ".csv,text/csv",
    hint:
      "A header row naming the columns, then one row per record; every column but the label must be a number. " +
      "Every 10th row goes to the test split.",
    unit: "rows",
  },
  images: {
    option: "Images (a .zip with one folder per class)",
    label: "Dataset file (zip of class folders)",
    accept: ".zip,application/zip",
    hint:
      "One folder per class (cats/001.jpg, dogs/001.png, …); JPEG, PNG, WebP, GIF, TIFF or AVIF. Each image is " +
      "resized to cover the size below and cropped to it. Every 10th image of each class goes to the test split.",
    unit: "images",
  },
  text: {
    option: "Plain text",
    label: "Dataset file (plain text)",
    accept: ".txt,text/plain",
    hint:
      "UTF-8 text, a sentence or paragraph per line, for the masked language model. Every 20th line goes to the " +
      "test split.",
    unit: "lines",
  },
};

interface ImportView {
  readonly id: string;
  readonly name: string;
  readonly status: "queued" | "converting" | "ready" | "failed";
  readonly bytesDone: number;
  readonly bytesTotal: number;
  readonly records: number;
  readonly error: string | null;
}

interface ManifestSplits {
  readonly splits: {
    readonly train: { readonly records: number };
    readonly test: { readonly records: number };
  };
}

type State =
  | { readonly kind: "idle" }
  | { readonly kind: "uploading"; readonly sent: number; readonly total: number; readonly resumed: boolean }
  | { readonly kind: "converting"; readonly view: ImportView | null }
  | { readonly kind: "ready"; readonly name: string; readonly train: number; readonly test: number }
  | { readonly kind: "failed"; readonly message: string };

interface Errors {
  file?: string;
  name?: string;
  size?: string;
  vocabSize?: string;
}

export interface DatasetUploadProps {
  /** Called with the new dataset's name once it is ready. */
  readonly onReady?: (datasetName: string) => void;
}

export function DatasetUpload({ onReady }: DatasetUploadProps) {
  const [format, setFormat] = useState<Format>("csv");
  const [file, setFile] = useState<File | null>(null);
  const [name, setName] = useState("");
  const [width, setWidth] = useState("32");
  const [height, setHeight] = useState("32");
  const [channels, setChannels] = useState<1 | 3>(3);
  const [vocabSize, setVocabSize] = useState("4096");
  const [labelColumn, setLabelColumn] = useState("");
  const [labelKind, setLabelKind] = useState<"class" | "value">("class");
  const [errors, setErrors] = useState<Errors>({});
  const [state, setState] = useState<State>({ kind: "idle" });
  const upload = useRef<Upload | null>(null);
  /** The last file uploaded completely, so a refused import (a taken name) does not send it again. */
  const finished = useRef<{ file: File; uploadId: string } | null>(null);
  const alive = useRef(true);
  /** Whether the component is still on the page (read after every await). */
  const mounted = () => alive.current;

  useEffect(() => {
    alive.current = true;
    return () => {
      // Leaving the page keeps the partial upload on the platform, to resume later.
      alive.current = false;
      void upload.current?.abort();
    };
  }, []);

  const busy = state.kind === "uploading" || state.kind === "converting";

  async function submit() {
    const found: Errors = {};
    if (file === null) found.file = `Choose a file: ${FORMATS[format].label.toLowerCase()}.`;
    if (!NAME_PATTERN.test(name)) {
      found.name = "Use 1 to 64 lowercase letters, digits and “-”, starting with a letter or digit.";
    }
    const side = (text: string) => (/^\d+$/.test(text) ? Number(text) : Number.NaN);
    if (format === "images" && ![side(width), side(height)].every((value) => value >= 4 && value <= 1024)) {
      found.size = "Width and height are whole numbers of pixels from 4 to 1024.";
    }
    if (format === "text" && !(side(vocabSize) >= 6 && side(vocabSize) <= 65536)) {
      found.vocabSize = "A whole number from 6 to 65536.";
    }
    setErrors(found);
    if (file === null || Object.keys(found).length > 0) return;

    let uploadId = finished.current?.file === file ? finished.current.uploadId : undefined;
    if (uploadId === undefined) {
      try {
        uploadId = await sendFile(file);
      } catch (error) {
        if (mounted()) setState({ kind: "failed", message: uploadFailure(error) });
        return;
      }
      finished.current = { file, uploadId };
    }
    if (!mounted()) return;

    setState({ kind: "converting", view: null });
    const options =
      format === "csv"
        ? { ...(labelColumn.trim() === "" ? {} : { labelColumn: labelColumn.trim() }), labelKind }
        : format === "images"
          ? { width: Number(width), height: Number(height), channels }
          : { vocabSize: Number(vocabSize) };
    const created = await callApi<ImportView>("POST", IMPORTS_PATH, { name, uploadId, format, ...options });
    if (!mounted()) return;
    if (!created.ok) {
      // The upload is gone (deleted, or imported already): the next try sends the file again.
      if (created.code === "NOT_FOUND") finished.current = null;
      setState({ kind: "failed", message: describeFailure(created) });
      return;
    }
    await follow(created.data);
  }

  /** Uploads the file (resuming an earlier upload of it when there is one); resolves with its id. */
  function sendFile(chosen: File): Promise<string> {
    setState({ kind: "uploading", sent: 0, total: chosen.size, resumed: false });
    return new Promise<string>((resolve, reject) => {
      const task = new Upload(chosen, {
        // Absolute: stored upload URLs are resolved against it when resuming.
        endpoint: new URL(UPLOADS_PATH, window.location.origin).href,
        chunkSize: CHUNK_BYTES,
        retryDelays: [0, 1000, 3000, 5000, 10000],
        metadata: { filename: chosen.name, filetype: chosen.type || "application/octet-stream" },
        removeFingerprintOnSuccess: true,
        onProgress: (sent, total) => {
          if (mounted()) {
            setState((current) => ({
              kind: "uploading",
              sent,
              total,
              resumed: current.kind === "uploading" && current.resumed,
            }));
          }
        },
        onSuccess: () => {
          const id = new URL(task.url ?? "", window.location.origin).pathname.split("/").at(-1) ?? "";
          resolve(id);
        },
        onError: reject,
      });
      upload.current = task;
      void task
        .findPreviousUploads()
        .then((previous) => {
          const latest = [...previous].sort((a, b) => b.creationTime.localeCompare(a.creationTime))[0];
          if (latest !== undefined) {
            task.resumeFromPreviousUpload(latest);
            setState({ kind: "uploading", sent: 0, total: chosen.size, resumed: true });
          }
          task.start();
        })
        .catch(() => {
          task.start();
        });
    });
  }

  /** Polls the import until it is ready or failed. */
  async function follow(view: ImportView) {
    let current = view;
    for (;;) {
      if (!mounted()) return;
      if (current.status === "failed") {
        setState({
          kind: "failed",
          message: `The file could not be converted: ${current.error ?? "unknown error"}`,
        });
        return;
      }
      if (current.status === "ready") break;
      setState({ kind: "converting", view: current });
      await new Promise((resolve) => setTimeout(resolve, POLL_MS));
      const read = await callApi<ImportView>("GET", `${IMPORTS_PATH}/${encodeURIComponent(current.id)}`);
      if (!read.ok) {
        if (mounted()) setState({ kind: "failed", message: describeFailure(read) });
        return;
      }
      current = read.data;
    }
    const manifest = await callApi<ManifestSplits>(
      "GET",
      `/api/v1/datasets/${encodeURIComponent(current.name)}`,
    );
    if (!mounted()) return;
    // An imported upload is deleted: importing the file again means sending it again.
    finished.current = null;
    const train = manifest.ok ? manifest.data.splits.train.records : current.records;
    const test = manifest.ok ? manifest.data.splits.test.records : 0;
    setState({ kind: "ready", name: current.name, train, test });
    onReady?.(current.name);
  }

  return (
    // Not a <form>: the component sits inside the experiment form, and forms cannot nest.
    <div className="form" data-testid="dataset-upload">
      <div className="stack">
        <div className="field">
          <label htmlFor="dataset-format">Kind of data</label>
          <select
            id="dataset-format"
            name="format"
            value={format}
            data-testid="dataset-upload-format"
            disabled={busy}
            onChange={(event) => {
              const chosen = event.target.value;
              setFormat(chosen === "images" || chosen === "text" ? chosen : "csv");
            }}
          >
            {(Object.keys(FORMATS) as Format[]).map((key) => (
              <option key={key} value={key}>
                {FORMATS[key].option}
              </option>
            ))}
          </select>
        </div>
        <div className="field">
          <label htmlFor="dataset-file">{FORMATS[format].label}</label>
          <input
            id="dataset-file"
            name="file"
            type="file"
            accept={FORMATS[format].accept}
            data-testid="dataset-upload-file"
            aria-invalid={errors.file ? true : undefined}
            aria-describedby="dataset-file-hint dataset-file-error"
            disabled={busy}
            onChange={(event) => {
              setFile(event.target.files?.[0] ?? null);
            }}
          />
          <p id="dataset-file-hint" className="hint">
            {FORMATS[format].hint}
          </p>
          <FieldError id="dataset-file-error" message={errors.file} />
        </div>
        <div className="field">
          <label htmlFor="dataset-name">Dataset name</label>
          <input
            id="dataset-name"
            name="name"
            value={name}
            data-testid="dataset-upload-name"
            aria-invalid={errors.name ? true : undefined}
            aria-describedby="dataset-name-hint dataset-name-error"
            autoCapitalize="none"
            spellCheck={false}
            maxLength={64}
            disabled={busy}
            onChange={(event) => {
              setName(event.target.value);
            }}
          />
          <p id="dataset-name-hint" className="hint">
            Lowercase letters, digits and “-”; experiments name their dataset by it.
          </p>
          <FieldError id="dataset-name-error" message={errors.name} />
        </div>
        {format === "csv" ? (
          <div className="field-row">
            <div className="field">
              <label htmlFor="dataset-label-column">Label column</label>
              <input
                id="dataset-label-column"
                name="labelColumn"
                value={labelColumn}
                data-testid="dataset-upload-label-column"
                aria-describedby="dataset-label-column-hint"
                spellCheck={false}
                disabled={busy}
                onChange={(event) => {
                  setLabelColumn(event.target.value);
                }}
              />
              <p id="dataset-label-column-hint" className="hint">
                Its name in the header; empty for the last column.
              </p>
            </div>
            <div className="field">
              <label htmlFor="dataset-label-kind">Label kind</label>
              <select
                id="dataset-label-kind"
                name="labelKind"
                value={labelKind}
                data-testid="dataset-upload-label-kind"
                aria-describedby="dataset-label-kind-hint"
                disabled={busy}
                onChange={(event) => {
                  setLabelKind(event.target.value === "value" ? "value" : "class");
                }}
              >
                <option value="class">Class (classification)</option>
                <option value="value">Value (regression)</option>
              </select>
              <p id="dataset-label-kind-hint" className="hint">
                Classes are whole numbers 0, 1, … or names; values are numbers.
              </p>
            </div>
          </div>
        ) : null}
        {format === "images" ? (
          <div className="stack">
            <div className="field-row">
              {(
                [
                  ["width", "Width (pixels)", width, setWidth],
                  ["height", "Height (pixels)", height, setHeight],
                ] as const
              ).map(([key, label, value, setValue]) => (
                <div className="field" key={key}>
                  <label htmlFor={`dataset-image-${key}`}>{label}</label>
                  <input
                    id={`dataset-image-${key}`}
                    name={key}
                    inputMode="numeric"
                    value={value}
                    data-testid={`dataset-upload-${key}`}
                    aria-invalid={errors.size ? true : undefined}
                    aria-describedby="dataset-image-size-error"
                    disabled={busy}
                    onChange={(event) => {
                      setValue(event.target.value.trim());
                    }}
                  />
                </div>
              ))}
              <div className="field">
                <label htmlFor="dataset-image-channels">Colour</label>
                <select
                  id="dataset-image-channels"
                  name="channels"
                  value={channels}
                  data-testid="dataset-upload-channels"
                  disabled={busy}
                  onChange={(event) => {
                    setChannels(event.target.value === "1" ? 1 : 3);
                  }}
                >
                  <option value={3}>RGB (3 channels)</option>
                  <option value={1}>Grey (1 channel)</option>
                </select>
              </div>
            </div>
            <p className="hint">
              The model&apos;s input size: its input takes height × width × channels values.
            </p>
            <FieldError id="dataset-image-size-error" message={errors.size} />
          </div>
        ) : null}
        {format === "text" ? (
          <div className="field">
            <label htmlFor="dataset-vocab-size">Dataset vocabulary size</label>
            <input
              id="dataset-vocab-size"
              name="vocabSize"
              inputMode="numeric"
              value={vocabSize}
              data-testid="dataset-upload-vocab-size"
              aria-invalid={errors.vocabSize ? true : undefined}
              aria-describedby="dataset-vocab-size-hint dataset-vocab-size-error"
              disabled={busy}
              onChange={(event) => {
                setVocabSize(event.target.value.trim());
              }}
            />
            <p id="dataset-vocab-size-hint" className="hint">
              The most frequent words (and punctuation marks) get their own token; others become [UNK]. At
              most the model&apos;s vocabulary size.
            </p>
            <FieldError id="dataset-vocab-size-error" message={errors.vocabSize} />
          </div>
        ) : null}
      </div>

      <div className="actions">
        <button
          type="button"
          className="button"
          disabled={busy}
          data-testid="dataset-upload-submit"
          onClick={() => void submit()}
        >
          {state.kind === "uploading"
            ? "Uploading…"
            : state.kind === "converting"
              ? "Converting…"
              : "Upload dataset"}
        </button>
      </div>

      <div aria-live="polite">
        {state.kind === "uploading" ? (
          <div className="stack">
            <progress
              max={100}
              value={percent(state.sent, state.total)}
              data-testid="dataset-upload-progress"
            />
            <p role="status" className="notice notice-info" data-testid="dataset-upload-status">
              {state.resumed ? "Resuming the upload" : "Uploading"}: {percent(state.sent, state.total)} % (
              {formatBytes(state.sent)} of {formatBytes(state.total)})
            </p>
          </div>
        ) : null}
        {state.kind === "converting" ? (
          <div className="stack">
            <progress
              max={100}
              value={state.view ? percent(state.view.bytesDone, state.view.bytesTotal) : 0}
              data-testid="dataset-conversion-progress"
            />
            <p role="status" className="notice notice-info" data-testid="dataset-upload-status">
              {state.view === null || state.view.status === "queued"
                ? "Uploaded; waiting for the conversion to start…"
                : `Converting: ${percent(state.view.bytesDone, state.view.bytesTotal)} % (${formatCount(state.view.records)} ${FORMATS[format].unit})`}
            </p>
          </div>
        ) : null}
        {state.kind === "ready" ? (
          <p className="notice notice-ok" data-testid="dataset-upload-ready">
            <strong>{state.name}</strong> ready: {formatCount(state.train + state.test)} records (
            {formatCount(state.train)} train / {formatCount(state.test)} test)
          </p>
        ) : null}
        {state.kind === "failed" ? (
          <div role="alert" className="notice notice-error" data-testid="dataset-upload-error">
            {state.message}
          </div>
        ) : null}
      </div>
    </div>
  );
}

function percent(done: number, total: number): number {
  return total <= 0 ? 100 : Math.min(100, Math.floor((done / total) * 100));
}

/** A tus failure as one sentence: the platform's own words when it answered. */
function uploadFailure(error: unknown): string {
  const detailed = error as Partial<DetailedError>;
  const response = detailed.originalResponse;
  if (response) {
    const status = response.getStatus();
    const body = response.getBody().trim();
    if (status === 401) return "Your session has ended. Sign in again.";
    if (body !== "") return `The upload was refused: ${body}`;
    return `The upload was refused (HTTP ${status}).`;
  }
  return "The upload was interrupted. Press Upload again to resume where it stopped.";
}
