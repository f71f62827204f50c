import { createHash } from "node:crypto";
import { mkdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { expect, request as playwrightRequest, test, type APIRequestContext } from "@playwright/test";
import { startAux, startPeer } from "../support/barnraise-processes.ts";
import { recordMatcher, type RunningProcess } from "../support/processes.ts";
import { e2eRun } from "../support/run-env.ts";
import {
  createAuxToken,
  createPeerToken,
  getJson,
  getWithReconnect,
  publishRun,
  type Checkpoint,
  type MetricPoint,
  type Metrics,
} from "../support/runs.ts";
import { processStory } from "../support/story.ts";
import { register } from "../support/ui.ts";
import { launchWebServer, type RunningWebServer } from "../support/web-server.ts";

// A run survives a full crash. On a platform of its own (a `next start` on the spare port), an
// organizer's run trains with an aux and two peers until checkpoints exist; then the platform, the
// aux and both peers are killed with SIGKILL at the same moment, as a power cut would. Started
// again on the same data (database, checkpoints, identities, tokens), the run continues past the
// step it had reached: no metric row at or below it changed, every checkpoint listed before the
// crash is still listed, and every listed checkpoint downloads whole. The steps lost, and the time
// from the restart to the next step, are annotated on the report.

const TARGET_BATCH = 4096;
const LOCAL_BATCH = 64;
const CHECKPOINT_EVERY = 5;

let platform: RunningWebServer | undefined;
let api: APIRequestContext | undefined;
const { processes, workDir } = processStory("full-crash", {
  onFailure: async (info) => {
    if (platform !== undefined) await info.attach("platform.log", { path: platform.logFile });
  },
  cleanup: async () => {
    await api?.dispose();
    await platform?.stop();
    if (platform !== undefined) await rm(platform.dataDir, { recursive: true, force: true });
  },
});

/** The checkpoints and the whole loss curve, as anyone reads them. */
async function readRun(experimentId: string) {
  if (api === undefined) throw new Error("no platform");
  const [metrics, { checkpoints }] = await Promise.all([
    getJson<Metrics>(api, `/api/v1/experiments/${experimentId}/metrics?maxPoints=5000`),
    getJson<{ checkpoints: Checkpoint[] }>(api, `/api/v1/experiments/${experimentId}/checkpoints`),
  ]);
  return { metrics, checkpoints };
}

const pointKey = (point: MetricPoint) => `${point.timeline}/${point.step}`;
const isStep = recordMatcher(/^step \d+$/);

test("a run survives the platform, the aux and every peer killed at once", async ({ browser }, testInfo) => {
  test.setTimeout(8 * 60_000);
  const baseURL = `http://localhost:${e2eRun.sparePort}`;
  const suffix = Date.now().toString(36);
  const experimentId = `crash-${suffix}`;
  await mkdir(testInfo.outputDir, { recursive: true });
  platform = await launchWebServer({ port: e2eRun.sparePort, logFile: testInfo.outputPath("platform.log") });
  api = await playwrightRequest.newContext({ baseURL });

  const context = await browser.newContext({ baseURL });
  const organizer = await context.newPage();
  await register(organizer, `survivor-${suffix}`);
  await publishRun(organizer, {
    id: experimentId,
    name: `Digits through a crash ${suffix}`,
    targetBatch: TARGET_BATCH,
    localBatch: LOCAL_BATCH,
    checkpointEvery: CHECKPOINT_EVERY,
  });
  const auxToken = await createAuxToken(organizer, "crash aux");
  const peerToken = await createPeerToken(organizer, experimentId, "two desktops");
  await context.close();

  // The same programs with the same identities, data directories and tokens, before and after.
  const startAll = (round: string): RunningProcess[] => [
    startAux(processes, `aux-${round}`, { server: baseURL, token: auxToken, dir: join(workDir(), "aux") }),
    ...["desk-1", "desk-2"].map((name) =>
      startPeer(processes, `${name}-${round}`, {
        server: baseURL,
        token: peerToken,
        dir: join(workDir(), name),
        batchSize: LOCAL_BATCH,
      }),
    ),
  ];

  let beforeCrash = await readRun(experimentId);
  let swarmStep = 0;
  await test.step("the run trains until two checkpoints exist, then everything is killed at once", async () => {
    const nodes = startAll("before");
    await expect
      .poll(async () => (beforeCrash = await readRun(experimentId)).checkpoints.length, {
        timeout: 180_000,
        intervals: [2_000],
      })
      .toBeGreaterThanOrEqual(2);
    // A few steps past the last checkpoint, so a crash has something to lose.
    const checkpointStep = Math.max(...beforeCrash.checkpoints.map((checkpoint) => checkpoint.step));
    await expect
      .poll(
        async () =>
          Math.max(0, ...(beforeCrash = await readRun(experimentId)).metrics.points.map((p) => p.step)),
        { timeout: 60_000, intervals: [500] },
      )
      .toBeGreaterThan(checkpointStep + 1);
    await Promise.all([platform?.kill(), ...nodes.map((node) => node.kill())]);
    // The step the swarm had reached, from the peers' own logs: the platform's curve lags a step
    // or more behind the swarm (the aux posts a step once its stragglers' reports are in).
    swarmStep = Math.max(...nodes.slice(1).map((peer) => Number(peer.filter(isStep).at(-1)?.step ?? 0)));
  });

  let atCrash = beforeCrash;
  /** The last step the platform recorded before the crash. */
  let crashStep = 0;
  await test.step("started again on the same data, the platform lost nothing it had accepted", async () => {
    platform = await launchWebServer({
      port: e2eRun.sparePort,
      logFile: testInfo.outputPath("platform.log"),
      dataDir: platform?.dataDir,
    });
    atCrash = await readRun(experimentId);
    crashStep = Math.max(...atCrash.metrics.points.map((point) => point.step));
    expect(crashStep).toBeGreaterThanOrEqual(
      Math.max(...beforeCrash.metrics.points.map((point) => point.step)),
    );
    // Every checkpoint listed before the kill is listed after it, and every listed one downloads
    // whole: the bytes hash to the listed SHA-256 (none is half-written or missing its file).
    const listed = new Set(atCrash.checkpoints.map((checkpoint) => checkpoint.id));
    for (const checkpoint of beforeCrash.checkpoints) expect(listed.has(checkpoint.id)).toBe(true);
    for (const checkpoint of atCrash.checkpoints) {
      const response = api === undefined ? undefined : await getWithReconnect(api, checkpoint.downloadUrl);
      expect(response?.status(), checkpoint.downloadUrl).toBe(200);
      const bytes = (await response?.body()) ?? Buffer.alloc(0);
      expect(bytes.byteLength).toBe(checkpoint.sizeBytes);
      expect(createHash("sha256").update(bytes).digest("hex")).toBe(checkpoint.sha256);
    }
  });

  await test.step("the aux and the peers start again, and the run continues past the crash", async () => {
    const restartedAt = Date.now();
    const nodes = startAll("after");
    const [aux, ...peers] = nodes;
    if (aux === undefined) throw new Error("no aux");
    // The aux loads the run's latest checkpoint from the platform and serves it; the peers load it.
    const latestCheckpoint = Math.max(...atCrash.checkpoints.map((checkpoint) => checkpoint.step));
    const served = await aux.waitForRecord(
      "the platform's checkpoint",
      recordMatcher(/^serving the platform's checkpoint of step \d+/),
      60_000,
    );
    expect(served.step).toBe(latestCheckpoint);
    const firstSteps = await Promise.all(peers.map((peer) => peer.waitForRecord("a step", isStep, 120_000)));
    const firstStepAt = Math.min(...firstSteps.map((record) => Number(record.time)));
    // Every peer went on from the checkpoint, not from scratch.
    for (const first of firstSteps) expect(Number(first.step)).toBeGreaterThan(latestCheckpoint);

    const pastCrash = Math.max(swarmStep, crashStep);
    let after = atCrash;
    await expect
      .poll(
        async () => {
          after = await readRun(experimentId);
          return Math.max(...after.metrics.points.filter((p) => !p.discarded).map((p) => p.step));
        },
        { timeout: 180_000, intervals: [2_000] },
      )
      .toBeGreaterThan(pastCrash);

    // No row recorded before the crash changed. Steps recorded past the checkpoint the swarm went
    // on from are kept, on the timeline they belong to, and marked discarded.
    const rows = new Map(after.metrics.points.map((point) => [pointKey(point), point]));
    for (const point of atCrash.metrics.points) {
      expect(rows.get(pointKey(point)), pointKey(point)).toEqual({
        ...point,
        discarded: point.step > latestCheckpoint,
      });
    }
    const resumed = after.metrics.events.filter((event) => event.kind === "resumed");
    expect(resumed.map((event) => event.step)).toEqual(
      crashStep > latestCheckpoint ? [latestCheckpoint] : [],
    );
    // The resumed model is the checkpoint's, not a fresh one: its loss is far below ln 10.
    const firstResumed = after.metrics.points.find(
      (point) => point.step > latestCheckpoint && !point.discarded,
    );
    expect(firstResumed?.loss).toBeLessThan(0.8 * Math.log(10));

    const stepsLost = swarmStep - latestCheckpoint;
    testInfo.annotations.push(
      {
        type: "steps lost in the crash",
        description: `${stepsLost}: the swarm had reached step ${swarmStep}, the latest checkpoint was of step ${latestCheckpoint} (one every ${CHECKPOINT_EVERY})`,
      },
      {
        type: "restart to the first step",
        description: `${((firstStepAt - restartedAt) / 1000).toFixed(1)} s`,
      },
    );
    // One checkpoint interval, plus the steps taken while the last checkpoint was on its way (steps
    // of a fifth of a second here; a checkpoint takes about a second to fetch and upload).
    expect(stepsLost).toBeLessThanOrEqual(2 * CHECKPOINT_EVERY);
  });
});
