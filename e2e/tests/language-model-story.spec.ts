import { readdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { expect, test } from "@playwright/test";
import * as tf from "@tensorflow/tfjs";
import { startAux, startPeer } from "../support/barnraise-processes.ts";
import { saveLanguageModel } from "../support/own-model.ts";
import { recordMatcher } from "../support/processes.ts";
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

// An organizer brings their own language model and text: a Keras-style next-token model (an
// Embedding and a Dense layer at every position) saved by TF.js, and a plain text. The form takes
// both, with the next-token task; a volunteer's peer trains it, the aux scores each checkpoint's
// held-out perplexity, which the public page charts far below the untrained model's (about the
// vocabulary's size), and the TF.js checkpoint predicts a distribution at every position.

const POSITIONS = 8;
/** The model's vocabulary: at least the text's (5 special tokens and 20 words). */
const VOCABULARY = 32;
const WORDS = Array.from({ length: 20 }, (_, i) => `w${String.fromCharCode(97 + i)}`);
const TARGET_BATCH = 32;
const LOCAL_BATCH = 16;
const CHECKPOINT_EVERY = 10;

/**
 * Line i: five consecutive words (wrapping): each word tells the next. The first word runs through
 * all 20 in both splits (the platform holds out every 20th line).
 */
function counting(lines: number): string {
  return Array.from({ length: lines }, (_, i) => {
    const start = i + Math.floor(i / 20);
    return Array.from({ length: 5 }, (_, k) => WORDS[(start + k) % WORDS.length]).join(" ");
  }).join("\n");
}

const { processes, contexts, workDir } = processStory("language-model-story");

interface EvaluatedCheckpoint extends Checkpoint {
  readonly evaluation: { metric: string; value: number; loss: number; samples: number } | null;
}

test("an organizer trains their own next-token model on their own text", async ({
  browser,
  request,
}, testInfo) => {
  test.setTimeout(6 * 60_000);
  const suffix = Date.now().toString(36);
  const experimentId = `own-lm-${suffix}`;
  const datasetName = `counting-${suffix}`;
  const saved = await saveLanguageModel(POSITIONS, VOCABULARY);
  const files = workDir();
  await writeFile(join(files, "model.json"), saved.modelJson);
  await writeFile(join(files, "weights.bin"), saved.weights);
  await writeFile(join(files, "counting.txt"), counting(400));

  const organizerContext = await browser.newContext();
  const visitorContext = await browser.newContext();
  contexts.push(organizerContext, visitorContext);
  const organizer = await organizerContext.newPage();
  const visitor = await visitorContext.newPage();

  await test.step("the form takes the model, the next-token task and the text", async () => {
    await register(organizer, `organizer-${suffix}`);
    await organizer.goto("/experiments/new");
    await organizer.getByLabel("Experiment id").fill(experimentId);
    await organizer.getByLabel("Name", { exact: true }).fill(`Counting ${suffix}`);
    await organizer.getByLabel("Model kind").selectOption("uploaded");
    await organizer
      .getByLabel("Model files (model.json and its .bin weights)")
      .setInputFiles([join(files, "model.json"), join(files, "weights.bin")]);
    await expect(organizer.getByLabel("Model SHA-256")).toHaveValue(/^[0-9a-f]{64}$/);
    await organizer.getByLabel("Task").selectOption("next-token");
    await expect(organizer.getByLabel("Loss")).toHaveValue("sparse-categorical-crossentropy");

    await organizer.getByLabel("Kind of data").selectOption("text");
    await organizer.getByLabel("Dataset file (plain text)").setInputFiles(join(files, "counting.txt"));
    await organizer.getByLabel("Dataset name").fill(datasetName);
    await organizer.getByLabel("Dataset vocabulary size").fill(String(VOCABULARY));
    await organizer.getByRole("button", { name: "Upload dataset" }).click();
    await expect(organizer.getByTestId("dataset-upload-ready")).toContainText(
      `${datasetName} ready: 400 records (380 train / 20 test)`,
      { timeout: 60_000 },
    );
    await expect(organizer.getByLabel("Training dataset")).toHaveValue(datasetName);

    await createSmallRun(organizer, {
      id: experimentId,
      targetBatch: TARGET_BATCH,
      localBatch: LOCAL_BATCH,
      learningRate: 0.05,
      checkpointEvery: CHECKPOINT_EVERY,
    });
    const { config } = await getJson<{
      config: { model: Record<string, unknown>; dataset: { name: string } };
    }>(request, `/api/v1/experiments/${experimentId}`);
    expect(config.model).toMatchObject({ kind: "uploaded", task: "next-token", metrics: ["perplexity"] });
    expect(config.dataset.name).toBe(datasetName);
  });

  await test.step("an aux and a volunteer's peer train it", async () => {
    const auxToken = await createAuxToken(organizer, "language-model aux");
    const aux = startAux(processes, "aux", { server: baseURL, token: auxToken, dir: join(workDir(), "aux") });
    await aux.waitForRecord("registered address", recordMatcher("registered address"), 60_000);
    const peerToken = await createPeerToken(organizer, experimentId, "a laptop");
    const peer = startPeer(processes, "laptop", {
      server: baseURL,
      token: peerToken,
      dir: join(workDir(), "laptop"),
      batchSize: LOCAL_BATCH,
    });
    await peer.waitForRecord("joined", recordMatcher(/^joined experiment/), 60_000);
  });

  await test.step("the public page charts the held-out perplexity far below the untrained model's", async () => {
    await visitor.goto(`/experiments/${experimentId}`);
    const chart = visitor.getByTestId("chart-evaluation");
    await expect
      .poll(async () => Number((await chart.getAttribute("data-latest-step")) ?? 0), {
        timeout: 180_000,
        intervals: [2_000],
      })
      .toBeGreaterThanOrEqual(3 * CHECKPOINT_EVERY);
    await expect(chart).toHaveAttribute("data-metric", "perplexity");
    const step = Number(await chart.getAttribute("data-latest-step"));
    const shown = Number(await chart.getAttribute("data-latest-value"));
    const { checkpoints } = await getJson<{ checkpoints: EvaluatedCheckpoint[] }>(
      request,
      `/api/v1/experiments/${experimentId}/checkpoints`,
    );
    const evaluated = checkpoints.find((entry) => entry.step === step && entry.evaluation !== null);
    // 20 test lines of five words: each word and the [SEP] after the last are predicted.
    expect(evaluated?.evaluation).toMatchObject({ metric: "perplexity", value: shown, samples: 20 * 6 });
    testInfo.annotations.push({
      type: "held-out perplexity (aux)",
      description: `step ${step}: ${shown.toFixed(2)} (untrained: about ${VOCABULARY}, uniform over the vocabulary)`,
    });
    // Untrained, the model's softmax is close to uniform over 32 tokens: a perplexity near 32.
    expect(shown).toBeLessThan(VOCABULARY / 3);
    await screenshots(visitor, testInfo, "language-model-held-out");

    const trained = await tf.loadLayersModel(
      new URL(
        `/api/v1/experiments/${experimentId}/checkpoints/${evaluated?.id ?? ""}/tfjs/model.json`,
        baseURL,
      ).href,
    );
    const predicted = tf.tidy(() => (trained.predict(tf.zeros([1, POSITIONS])) as tf.Tensor).shape);
    expect(predicted).toEqual([1, POSITIONS, VOCABULARY]);
  });

  await test.step("a volunteer who joins after the model's weights were altered on the platform's disk refuses to train it", async () => {
    const dataDir = process.env.E2E_DATA_DIR;
    if (dataDir === undefined) throw new Error("global setup did not say where the platform keeps its files");
    const { config } = await getJson<{ config: { model: { sha256: string } } }>(
      request,
      `/api/v1/experiments/${experimentId}`,
    );
    const modelDir = join(dataDir, "models", config.model.sha256);
    const weightsFile = (await readdir(modelDir)).find((name) => name.startsWith("weights-"));
    if (weightsFile === undefined) throw new Error(`no weights file in ${modelDir}`);
    // One flipped bit, the size unchanged: what a disk error or an attacker on the host leaves.
    const bytes = await readFile(join(modelDir, weightsFile));
    bytes[0] = (bytes[0] ?? 0) ^ 1;
    await writeFile(join(modelDir, weightsFile), bytes);
    const late = startPeer(processes, "late-laptop", {
      server: baseURL,
      token: await createPeerToken(organizer, experimentId, "a late laptop"),
      dir: join(workDir(), "late-laptop"),
      batchSize: LOCAL_BATCH,
    });
    expect(await late.waitForExit(60_000)).toEqual({ code: 13, signal: null });
    const refusal = await late.waitForRecord(
      "the refusal",
      recordMatcher(/differs from the signed SHA-256/),
      1_000,
    );
    expect(String(refusal.msg)).toContain(`${weightsFile} has SHA-256`);
    expect(String(refusal.msg)).toContain("refuses to train it");
  });
});
