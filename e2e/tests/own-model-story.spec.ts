import { execFile } from "node:child_process";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";
import { expect, test } from "@playwright/test";
import * as tf from "@tensorflow/tfjs";
import { startAux, startPeer } from "../support/barnraise-processes.ts";
import {
  accuracyOf,
  CLASSES,
  csvOf,
  FEATURES,
  labelledRows,
  loadSaved,
  saveClassifier,
  testRows,
} from "../support/own-model.ts";
import { recordMatcher, type RunningProcess } from "../support/processes.ts";
import { baseURL } from "../support/run-env.ts";
import {
  createAuxToken,
  createPeerToken,
  createSmallRun,
  getJson,
  type Checkpoint,
} from "../support/runs.ts";
import { processStory } from "../support/story.ts";
import { register, screenshots } from "../support/ui.ts";

// An organizer brings their own model and data: a Keras-style classifier saved by TF.js and a CSV
// of labelled rows. The form refuses a broken model file with its reason first; then the run is
// published, two volunteers' peers train it, the public page charts the aux's held-out accuracy of
// each checkpoint above the initial weights', and anyone can take the checkpoint away: as a TF.js
// model that predicts the test split far better than the initial weights did, and as safetensors
// that an independent Python reader finds holding the same numbers.

const ROWS = 3000;
const TARGET_BATCH = 64;
const LOCAL_BATCH = 16;
const CHECKPOINT_EVERY = 25;

const { processes, contexts, workDir } = processStory("own-model-story");

/** A listed checkpoint with the aux's held-out evaluation (null until it scored the checkpoint). */
interface EvaluatedCheckpoint extends Checkpoint {
  readonly evaluation: { metric: string; value: number; loss: number; samples: number } | null;
}
const run = promisify(execFile);

/** The safetensors reader of the published format: an 8-byte length, a JSON header, the data. */
const PYTHON_READER = `
import json, struct, sys
import numpy as np
data = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", data[:8])
header = json.loads(data[8:8 + n])
body = data[8 + n:]
header.pop("__metadata__", None)
out = {}
for name, info in header.items():
    begin, end = info["data_offsets"]
    array = np.frombuffer(body[begin:end], dtype="<f4").reshape(info["shape"])
    out[name] = {"shape": list(array.shape), "sum": float(array.astype(np.float64).sum())}
print(json.dumps(out))
`;

test("an organizer trains their own TF.js model on their own CSV, and the checkpoint works in TF.js and Python", async ({
  browser,
  request,
}, testInfo) => {
  test.setTimeout(8 * 60_000);
  const suffix = Date.now().toString(36);
  const experimentId = `own-model-${suffix}`;
  const datasetName = `colours-${suffix}`;
  const rows = labelledRows(ROWS);
  const held = testRows(rows);
  const saved = await saveClassifier();
  const initialAccuracy = accuracyOf(await loadSaved(saved), held);
  const files = workDir();
  await writeFile(join(files, "model.json"), saved.modelJson);
  await writeFile(join(files, "weights.bin"), saved.weights);
  await writeFile(join(files, "colours.csv"), csvOf(rows));
  // A broken model: the same weights under a topology with a layer Barnraise cannot train.
  const broken = JSON.parse(saved.modelJson.toString("utf8")) as {
    modelTopology: { config: { layers: { class_name: string }[] } };
  };
  const last = broken.modelTopology.config.layers.at(-1);
  if (last) last.class_name = "CapsuleLayer";
  await mkdir(join(files, "broken"), { recursive: true });
  await writeFile(join(files, "broken", "model.json"), JSON.stringify(broken));

  const organizerContext = await browser.newContext();
  const visitorContext = await browser.newContext({ acceptDownloads: true });
  contexts.push(organizerContext, visitorContext);
  const organizer = await organizerContext.newPage();
  const visitor = await visitorContext.newPage();
  const peers: RunningProcess[] = [];

  await test.step("the form refuses a broken model file, then accepts the model and the CSV", async () => {
    await register(organizer, `organizer-${suffix}`);
    await organizer.goto("/experiments/new");
    await organizer.getByLabel("Experiment id").fill(experimentId);
    await organizer.getByLabel("Name", { exact: true }).fill(`Colours ${suffix}`);
    await organizer.getByLabel("Model kind").selectOption("uploaded");

    const modelFiles = organizer.getByLabel("Model files (model.json and its .bin weights)");
    await modelFiles.setInputFiles([join(files, "broken", "model.json"), join(files, "weights.bin")]);
    const refusal = organizer.getByTestId("model-upload-error");
    await expect(refusal).toContainText("model.json");
    await expect(refusal).toContainText("is a CapsuleLayer, which Barnraise cannot train");
    await screenshots(organizer, testInfo, "own-model-refused");

    await modelFiles.setInputFiles([join(files, "model.json"), join(files, "weights.bin")]);
    await expect(organizer.getByTestId("model-upload-summary")).toContainText(
      `input [${FEATURES.length}], ${CLASSES.length} outputs (softmax)`,
    );
    await expect(organizer.getByLabel("Model SHA-256")).toHaveValue(/^[0-9a-f]{64}$/);
    await organizer.getByLabel("Task").selectOption("classification");

    await organizer.getByLabel("Dataset file (CSV)").setInputFiles(join(files, "colours.csv"));
    await organizer.getByLabel("Dataset name").fill(datasetName);
    await organizer.getByLabel("Label column").fill("colour");
    await organizer.getByLabel("Label kind").selectOption("class");
    await organizer.getByRole("button", { name: "Upload dataset" }).click();
    await expect(organizer.getByTestId("dataset-upload-ready")).toContainText(`${datasetName} ready`, {
      timeout: 60_000,
    });
    await expect(organizer.getByLabel("Training dataset")).toHaveValue(datasetName);

    await createSmallRun(organizer, {
      id: experimentId,
      targetBatch: TARGET_BATCH,
      localBatch: LOCAL_BATCH,
      learningRate: 0.01,
      checkpointEvery: CHECKPOINT_EVERY,
    });

    const { config } = await getJson<{
      config: { model: Record<string, unknown>; dataset: { name: string } };
    }>(request, `/api/v1/experiments/${experimentId}`);
    expect(config.model).toMatchObject({
      kind: "uploaded",
      task: "classification",
      loss: "sparse-categorical-crossentropy",
    });
    expect(config.dataset.name).toBe(datasetName);
  });

  await test.step("an aux and two volunteers' peers train it", async () => {
    const auxToken = await createAuxToken(organizer, "own-model aux");
    const aux = startAux(processes, "aux", { server: baseURL, token: auxToken, dir: join(workDir(), "aux") });
    await aux.waitForRecord("registered address", recordMatcher("registered address"), 60_000);
    const peerToken = await createPeerToken(organizer, experimentId, "two laptops");
    for (const name of ["laptop-1", "laptop-2"]) {
      peers.push(
        startPeer(processes, name, {
          server: baseURL,
          token: peerToken,
          dir: join(workDir(), name),
          batchSize: LOCAL_BATCH,
        }),
      );
    }
    for (const peer of peers) {
      await peer.waitForRecord("joined", recordMatcher(/^joined experiment/), 60_000);
    }
  });

  let checkpoint: Checkpoint | undefined;
  await test.step("the run checkpoints", async () => {
    await expect
      .poll(
        async () => {
          const { checkpoints } = await getJson<{ checkpoints: Checkpoint[] }>(
            request,
            `/api/v1/experiments/${experimentId}/checkpoints`,
          );
          checkpoint = checkpoints[0];
          return checkpoint?.step ?? 0;
        },
        { timeout: 240_000, intervals: [2_000] },
      )
      .toBeGreaterThanOrEqual(2 * CHECKPOINT_EVERY);
  });

  await test.step("the public page charts the checkpoints' held-out accuracy above the initial weights'", async () => {
    await visitor.goto(`/experiments/${experimentId}`);
    const chart = visitor.getByTestId("chart-evaluation");
    // The aux scores each checkpoint it uploaded; the page polls and draws a point per evaluation.
    await expect
      .poll(async () => Number((await chart.getAttribute("data-latest-step")) ?? 0), {
        timeout: 120_000,
        intervals: [2_000],
      })
      .toBeGreaterThanOrEqual(2 * CHECKPOINT_EVERY);
    await expect(chart).toHaveAttribute("data-metric", "accuracy");
    await expect(chart.getByTestId("evaluation-point").first()).toBeVisible();
    const step = Number(await chart.getAttribute("data-latest-step"));
    const shown = Number(await chart.getAttribute("data-latest-value"));
    const points = await chart.getByTestId("evaluation-point").evaluateAll((circles) =>
      circles.map((circle) => ({
        step: Number(circle.getAttribute("data-step")),
        value: Number(circle.getAttribute("data-value")),
      })),
    );
    expect(points.at(-1)).toEqual({ step, value: shown });

    // The chart shows what the platform recorded for that checkpoint.
    const { checkpoints } = await getJson<{ checkpoints: EvaluatedCheckpoint[] }>(
      request,
      `/api/v1/experiments/${experimentId}/checkpoints`,
    );
    const evaluated = checkpoints.find((entry) => entry.step === step && entry.evaluation !== null);
    expect(evaluated?.evaluation).toMatchObject({ metric: "accuracy", value: shown, samples: held.length });
    const cell = visitor
      .locator(`[data-testid="checkpoint-row"][data-step="${step}"]`)
      .getByTestId("checkpoint-evaluation");
    await expect(cell).toContainText("accuracy");
    testInfo.annotations.push({
      type: "held-out accuracy (aux)",
      description: `initial weights ${initialAccuracy.toFixed(3)}, step ${step} ${shown.toFixed(3)} (${held.length} rows)`,
    });
    expect(shown).toBeGreaterThan(initialAccuracy);
    await screenshots(visitor, testInfo, "own-model-held-out");
  });

  let trained: tf.LayersModel | undefined;
  await test.step("the TF.js checkpoint loads with tf.loadLayersModel and predicts better than the initial weights", async () => {
    if (checkpoint === undefined) throw new Error("no checkpoint listed");
    await visitor.goto(`/experiments/${experimentId}`);
    const row = visitor.locator(`[data-testid="checkpoint-row"][data-sha256="${checkpoint.sha256}"]`);
    const link = row.getByRole("link", { name: /^TF\.js/ });
    const href = await link.getAttribute("href");
    if (href === null) throw new Error("the checkpoint row has no TF.js link");
    trained = await tf.loadLayersModel(new URL(href, baseURL).href);
    const before = initialAccuracy;
    const after = accuracyOf(trained, held);
    testInfo.annotations.push({
      type: "test-split accuracy",
      description: `initial weights ${before.toFixed(3)}, step ${checkpoint.step} ${after.toFixed(3)} (${held.length} rows)`,
    });
    expect(after).toBeGreaterThan(before + 0.15);
    expect(after).toBeGreaterThan(0.7);
    await expect(visitor.getByTestId("checkpoint-tfjs-snippet")).toContainText("tf.loadLayersModel");
    await screenshots(visitor, testInfo, "own-model-dashboard");
  });

  await test.step("the safetensors file, read by Python, holds the same numbers", async () => {
    if (checkpoint === undefined || trained === undefined) throw new Error("no trained model");
    const row = visitor.locator(`[data-testid="checkpoint-row"][data-sha256="${checkpoint.sha256}"]`);
    const [download] = await Promise.all([
      visitor.waitForEvent("download"),
      row.getByRole("link", { name: /^safetensors/ }).click(),
    ]);
    const path = join(files, "checkpoint.safetensors");
    await writeFile(path, await readFile(await download.path()));
    const python = process.env.BARNRAISE_TEST_PYTHON ?? "python3";
    const { stdout } = await run(python, ["-c", PYTHON_READER, path]);
    const read = JSON.parse(stdout) as Record<string, { shape: number[]; sum: number }>;
    const weights = trained.getWeights();
    const names = trained.weights.map((weight) => weight.originalName);
    expect(Object.keys(read).sort()).toEqual([...names].sort());
    for (const [index, name] of names.entries()) {
      const tensor = weights[index];
      if (tensor === undefined) throw new Error(`no weight ${name}`);
      const values = Array.from(await tensor.data<"float32">());
      expect(read[name]?.shape, name).toEqual(tensor.shape);
      expect(read[name]?.sum ?? NaN, name).toBeCloseTo(
        values.reduce((sum, value) => sum + value, 0),
        3,
      );
    }
  });
});
