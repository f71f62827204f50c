import { join } from "node:path";
import { expect, test } from "@playwright/test";
import { startAux, startPeer } from "../support/barnraise-processes.ts";
import { recordMatcher, type RunningProcess } from "../support/processes.ts";
import { baseURL } from "../support/run-env.ts";
import { createAuxToken, createPeerToken, getJson } from "../support/runs.ts";
import { processStory } from "../support/story.ts";
import { register, screenshots } from "../support/ui.ts";

// A DiLoCo run from the form to the dashboard: the organizer publishes a run whose peers take local
// steps and then one outer Nesterov step per round, with top-k compression; an aux and two peers
// train it, and the public dashboard charts the bytes each peer sent per step and the share of the
// peers' time spent computing.

/** Samples all peers train on per round: small, so that rounds are quick. */
const SAMPLES_PER_ROUND = 256;
const LOCAL_BATCH = 32;
const MAX_STEPS = 40;
const CHECKPOINT_EVERY = 5;
const HIDDEN_UNITS = 32;
/** The MLP's parameters (784 → 32 → 10), and what one dense float32 copy of them takes. */
const PARAMETERS = 784 * HIDDEN_UNITS + HIDDEN_UNITS + HIDDEN_UNITS * 10 + 10;
const DENSE_BYTES = PARAMETERS * 4;

const { processes, contexts, workDir } = processStory("diloco-story");

interface ExperimentView {
  readonly config: {
    readonly training: Readonly<Record<string, unknown>>;
    readonly compression: Readonly<Record<string, unknown>>;
    readonly averaging: Readonly<Record<string, unknown>>;
  };
}

interface MetricPoint {
  readonly step: number;
  readonly bytesPerPeer: number | null;
  readonly utilization: number | null;
  readonly discarded: boolean;
}

test("an organizer publishes a DiLoCo run with top-k, and the dashboard charts bytes per peer and utilization", async ({
  browser,
  request,
}, testInfo) => {
  test.setTimeout(6 * 60_000);
  const suffix = Date.now().toString(36);
  const experimentId = `diloco-${suffix}`;
  const experimentName = `Digits with local steps ${suffix}`;
  const organizerContext = await browser.newContext();
  const visitorContext = await browser.newContext();
  contexts.push(organizerContext, visitorContext);
  const organizer = await organizerContext.newPage();
  const visitor = await visitorContext.newPage();
  const peers: RunningProcess[] = [];

  await test.step("the organizer creates a DiLoCo run with top-k compression through the form", async () => {
    await register(organizer, `organizer-${suffix}`);
    await organizer.goto("/experiments/new");
    await organizer.getByLabel("Experiment id").fill(experimentId);
    await organizer.getByLabel("Name", { exact: true }).fill(experimentName);
    await organizer.getByLabel("Description").fill("An MLP on MNIST, averaged once per round.");
    await organizer.getByLabel("Model kind").selectOption("mnist-mlp");
    await organizer.getByLabel("Hidden layer sizes").fill(String(HIDDEN_UNITS));
    await expect(organizer.getByLabel("Target batch size")).toHaveValue("1024");

    // DiLoCo: the untouched target batch becomes a round's samples, and the outer optimizer appears.
    await organizer.getByLabel("Averaging strategy").selectOption("diloco");
    const targetBatch = organizer.getByLabel("Target batch size (samples per round)");
    await expect(targetBatch).toHaveValue("16384");
    await expect(organizer.getByLabel("Outer learning rate")).toHaveValue("0.7");
    const outerMomentum = organizer.getByLabel("Outer momentum");
    await expect(outerMomentum).toHaveValue("0.9");
    await expect(
      organizer.getByRole("checkbox", { name: "Nesterov momentum on the outer step" }),
    ).toBeChecked();
    await expect(
      organizer.getByRole("checkbox", { name: /^Overlap averaging with compute/ }),
    ).not.toBeChecked();
    await organizer.getByLabel("Compression").selectOption("topk");
    await expect(organizer.getByLabel("Top-k density")).toHaveValue("0.015");
    const feedbackDecay = organizer.getByLabel("Error-feedback decay");
    await expect(feedbackDecay).toHaveValue("0.95");
    await feedbackDecay.fill("0.9");
    // With top-k, error feedback plays the momentum's part: the form suggests SparseLoCo's outer SGD.
    await expect(organizer.getByLabel("Outer learning rate")).toHaveValue("1");
    await expect(outerMomentum).toHaveValue("0");

    await targetBatch.fill(String(SAMPLES_PER_ROUND));
    await organizer.getByRole("checkbox", { name: /^Automatic/ }).uncheck();
    await organizer.getByLabel("Local batch size").fill(String(LOCAL_BATCH));
    await organizer.getByLabel("Stop after (steps)").fill(String(MAX_STEPS));
    await organizer.getByLabel("Learning rate", { exact: true }).fill("0.01");
    await organizer.getByLabel("Checkpoint every (steps)").fill(String(CHECKPOINT_EVERY));

    // An outer momentum of 1 is caught next to its field.
    await outerMomentum.fill("1");
    await organizer.getByRole("button", { name: "Create experiment" }).click();
    await expect(outerMomentum).toHaveAttribute("aria-invalid", "true");
    await expect(outerMomentum).toHaveAccessibleDescription(/Must be less than 1\./);
    await expect(organizer).toHaveURL(/\/experiments\/new$/);
    await screenshots(organizer, testInfo, "new-diloco-experiment-invalid");
    await outerMomentum.fill("0");
    await organizer.getByRole("button", { name: "Create experiment" }).click();
    await organizer.waitForURL(`${baseURL}/experiments/${experimentId}/manage`);

    const { config } = await getJson<ExperimentView>(request, `/api/v1/experiments/${experimentId}`);
    expect(config.averaging).toMatchObject({
      strategy: "diloco",
      outerOptimizer: { name: "sgd", learningRate: 1, momentum: 0, nesterov: true },
      delayedParameterUpdates: false,
    });
    expect(config.compression).toMatchObject({ method: "topk", topkDensity: 0.015, errorFeedbackDecay: 0.9 });
    expect(config.training).toMatchObject({
      targetBatchSize: SAMPLES_PER_ROUND,
      localBatchSize: LOCAL_BATCH,
      maxSteps: MAX_STEPS,
    });
    // The manage page's form shows the run as it was saved.
    await expect(organizer.getByLabel("Averaging strategy")).toHaveValue("diloco");
    await expect(organizer.getByLabel("Compression")).toHaveValue("topk");
  });

  await test.step("an aux and two peers train the run", async () => {
    const auxToken = await createAuxToken(organizer, "diloco aux");
    const aux = startAux(processes, "aux", { server: baseURL, token: auxToken, dir: join(workDir(), "aux") });
    await aux.waitForRecord("registered address", recordMatcher("registered address"), 60_000);
    const peerToken = await createPeerToken(organizer, experimentId, "two desktops");
    for (const name of ["desk-1", "desk-2"]) {
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
      const joined = await peer.waitForRecord("joined", recordMatcher(/^joined experiment/), 60_000);
      expect(joined.experimentId).toBe(experimentId);
    }
  });

  await test.step("the dashboard charts the bytes each peer sent per step and the compute utilization", async () => {
    await visitor.goto(`/experiments/${experimentId}`);
    await expect(visitor.getByTestId("now-strategy")).toHaveText("DiLoCo");
    await expect(visitor.getByTestId("config-strategy")).toHaveText(
      "DiLoCo: local steps, outer SGD (learning rate 1, momentum 0)",
    );
    await expect(visitor.getByTestId("config-compression")).toHaveText("Top-k 1.5 % + error feedback");

    // The page refreshes itself every few seconds: the charts gain points without a reload.
    const bytesChart = visitor.getByTestId("chart-bytes-per-peer");
    const utilizationChart = visitor.getByTestId("chart-utilization");
    await expect(bytesChart.getByText("Bytes sent per peer per step", { exact: true })).toBeVisible();
    await expect(utilizationChart.getByText("Compute utilization", { exact: true })).toBeVisible();
    for (const chart of [bytesChart, utilizationChart]) {
      await expect
        .poll(async () => Number((await chart.getAttribute("data-points")) ?? "0"), {
          timeout: 180_000,
          intervals: [2_000],
        })
        .toBeGreaterThanOrEqual(2);
    }
    // Each caption states the latest value: "2.1 kB at step 7", "93.5 % at step 7".
    await expect(bytesChart.getByText(/^\d+(\.\d+)? (B|kB|MB) at step \d+$/)).toBeVisible();
    await expect(utilizationChart.getByText(/^\d+(\.\d+)? % at step \d+$/)).toBeVisible();
    await expect(bytesChart.locator(".recharts-line")).not.toHaveCount(0);

    // The series behind the charts: every reported value in range, and the peers did exchange
    // top-k parts, which are far smaller than the dense float32 model they would otherwise send.
    const { points } = await getJson<{ points: MetricPoint[] }>(
      request,
      `/api/v1/experiments/${experimentId}/metrics`,
    );
    const bytes = points.flatMap((point) => (point.bytesPerPeer === null ? [] : [point.bytesPerPeer]));
    const utilization = points.flatMap((point) => (point.utilization === null ? [] : [point.utilization]));
    // Each record names the latest round's bytes until the next one ends, so most steps have them.
    expect(bytes.length).toBeGreaterThanOrEqual(Math.max(2, Math.ceil(points.length / 2)));
    expect(utilization.length).toBeGreaterThanOrEqual(2);
    for (const value of bytes) expect(value).toBeGreaterThanOrEqual(0);
    for (const value of utilization) {
      expect(value).toBeGreaterThanOrEqual(0);
      expect(value).toBeLessThanOrEqual(1);
    }
    expect(Math.max(...utilization), `utilization of each step: ${utilization.join(", ")}`).toBeGreaterThan(
      0,
    );
    const averaged = bytes.filter((value) => value > 0);
    expect(averaged.length, `bytes per peer of each step: ${bytes.join(", ")}`).toBeGreaterThan(0);
    for (const value of averaged) expect(value).toBeLessThan(DENSE_BYTES);
    testInfo.annotations.push(
      {
        type: "bytes per peer per step",
        description: `${points.map((point) => (point.bytesPerPeer === null ? "—" : Math.round(point.bytesPerPeer))).join(", ")} (dense float32 model: ${DENSE_BYTES})`,
      },
      {
        type: "utilization per step",
        description: utilization.map((value) => value.toFixed(3)).join(", "),
      },
    );
    await screenshots(visitor, testInfo, "diloco-dashboard");
  });
});
