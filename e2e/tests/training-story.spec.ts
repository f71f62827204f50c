import { createHash } from "node:crypto";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { expect, test, type Page } from "@playwright/test";
import { PeerExit, startAux, startPeer } from "../support/barnraise-processes.ts";
import { recordMatcher, type LogRecord, type RunningProcess } from "../support/processes.ts";
import { baseURL } from "../support/run-env.ts";
import {
  createAuxToken,
  createPeerToken,
  getJson,
  leaderboardSamples,
  publishRun,
  type Checkpoint,
  type Metrics,
} from "../support/runs.ts";
import { processStory } from "../support/story.ts";
import { register, screenshots } from "../support/ui.ts";

// The whole story with real processes: an organizer publishes an MNIST run, starts an aux peer and
// a peer of their own; a volunteer's two peers join, and the swarm trains together. Anyone watches
// the loss fall, sees the volunteer on the leaderboard and downloads a checkpoint whose bytes match
// its published SHA-256. A user taken off the allowlist is refused at the door, and a ban reaches
// the volunteer's running peers through the signed run control within 30 s: they exit, and the
// swarm steps on without them.

const TARGET_BATCH = 1024;
const LOCAL_BATCH = 64;
const CHECKPOINT_EVERY = 3;

const { processes, contexts, workDir } = processStory("training-story");

test("volunteers train a run together, anyone watches it, and a ban stops their peers", async ({
  browser,
  request,
}, testInfo) => {
  test.setTimeout(6 * 60_000);
  const suffix = Date.now().toString(36);
  const organizerName = `organizer-${suffix}`;
  const veraName = `vera-${suffix}`;
  const malloryName = `mallory-${suffix}`;
  const experimentId = `digits-${suffix}`;
  const experimentName = `Digits by everyone ${suffix}`;

  const newPage = async (): Promise<Page> => {
    const context = await browser.newContext();
    contexts.push(context);
    return context.newPage();
  };
  const organizer = await newPage();
  const vera = await newPage();
  const mallory = await newPage();
  const visitor = await newPage();

  let aux: RunningProcess | undefined;
  const veraPeers: RunningProcess[] = [];
  const allPeers: RunningProcess[] = [];

  await test.step("the organizer publishes a small MNIST run and starts an aux peer", async () => {
    await register(organizer, organizerName);
    await register(vera, veraName);
    await register(mallory, malloryName);

    await publishRun(organizer, {
      id: experimentId,
      name: experimentName,
      targetBatch: TARGET_BATCH,
      localBatch: LOCAL_BATCH,
      checkpointEvery: CHECKPOINT_EVERY,
    });

    for (const username of [veraName, malloryName]) {
      await organizer.getByLabel("Add a volunteer by username").fill(username);
      await organizer.getByRole("button", { name: "Add to allowlist" }).click();
      await expect(organizer.getByText(`${username} is approved and can now create a token.`)).toBeVisible();
      await expect(organizer.getByTestId(`allowlist-${username}`)).toBeVisible();
    }

    // The aux token is shown once, with the command to run it.
    const auxToken = await createAuxToken(organizer, "loopback aux");
    aux = startAux(processes, "aux", { server: baseURL, token: auxToken, dir: join(workDir(), "aux") });
    const listening = await aux.waitForRecord("listening", recordMatcher("listening"), 60_000);
    expect(JSON.stringify(listening.addresses)).toContain("/ip4/127.0.0.1/tcp/");
    // Registered, so the platform hands its address to every peer that joins.
    await aux.waitForRecord("registered address", recordMatcher("registered address"), 60_000);
  });

  let malloryToken = "";
  await test.step("the volunteer creates a token and two peers join with it, and one of the organizer's", async () => {
    const veraToken = await createPeerToken(vera, experimentId, "two peers");
    // Mallory is on the allowlist for now, so she can make a token too.
    malloryToken = await createPeerToken(mallory, experimentId, "mallory's laptop");
    // The organizer trains too, so the swarm keeps stepping once the volunteer is banned.
    const organizerToken = await createPeerToken(organizer, experimentId, "organizer's desktop");

    const start = (name: string, token: string) =>
      startPeer(processes, name, {
        server: baseURL,
        token,
        dir: join(workDir(), name),
        batchSize: LOCAL_BATCH,
      });
    veraPeers.push(start("vera-1", veraToken), start("vera-2", veraToken));
    allPeers.push(...veraPeers, start("organizer-peer", organizerToken));
    for (const peer of allPeers) {
      const joined = await peer.waitForRecord("joined", recordMatcher(/^joined experiment/), 60_000);
      expect(joined.experimentId).toBe(experimentId);
    }
  });

  await test.step("a user taken off the allowlist is refused", async () => {
    await organizer.goto(`/experiments/${experimentId}/manage`);
    const entry = organizer.getByTestId(`allowlist-${malloryName}`);
    await entry.getByRole("button", { name: `Remove ${malloryName}` }).click();
    await expect(organizer.getByText(`${malloryName} is removed from the allowlist.`)).toBeVisible();
    await expect(entry).toHaveCount(0);

    const refused = startPeer(processes, "mallory", {
      server: baseURL,
      token: malloryToken,
      dir: join(workDir(), "mallory"),
      batchSize: LOCAL_BATCH,
    });
    const status = await refused.waitForExit(60_000);
    expect(status, refused.tail(20)).toEqual({ code: PeerExit.notAllowlisted, signal: null });
    expect(refused.filter((record) => record.code === "NOT_ALLOWLISTED")).not.toHaveLength(0);
    expect(refused.filter(recordMatcher(/^joined experiment/))).toHaveLength(0);
  });

  await test.step("every peer contributes and steps with the swarm", async () => {
    for (const peer of allPeers) {
      await peer.waitForRecord(
        "first minibatch contributed",
        recordMatcher("first minibatch contributed"),
        90_000,
      );
      await peer.waitForRecord("a collaborative step", recordMatcher(/^step \d+$/), 120_000);
    }
  });

  const dashboard = `/experiments/${experimentId}`;
  await test.step("the public dashboard's loss curve gains points and the loss falls", async () => {
    await visitor.goto(dashboard);
    await expect(visitor.getByRole("heading", { level: 1, name: experimentName })).toBeVisible();
    const chart = visitor.getByTestId("chart-loss-step");
    const chartPoints = async () => {
      await visitor.reload();
      return Number((await chart.getAttribute("data-points", { timeout: 5_000 })) ?? "0");
    };
    let first = 0;
    await expect
      .poll(async () => (first = await chartPoints()), { timeout: 90_000, intervals: [2_000] })
      .toBeGreaterThanOrEqual(1);
    await expect
      .poll(chartPoints, { timeout: 120_000, intervals: [2_000] })
      .toBeGreaterThanOrEqual(Math.max(3, first + 1));

    // The series behind the chart: three steps or more, the loss lower at the last than at the
    // first, and at some step all three trainers (the volunteer's two, the organizer's) alive.
    await expect
      .poll(
        async () => {
          const { points } = await getJson<Metrics>(request, `/api/v1/experiments/${experimentId}/metrics`);
          const firstPoint = points[0];
          const lastPoint = points.at(-1);
          return {
            atLeastThreeSteps: points.length >= 3,
            lossFell: firstPoint !== undefined && lastPoint !== undefined && lastPoint.loss < firstPoint.loss,
            mostAlive: Math.max(0, ...points.map((point) => point.alivePeers)),
          };
        },
        { timeout: 90_000, intervals: [2_000] },
      )
      .toEqual({ atLeastThreeSteps: true, lossFell: true, mostAlive: 3 });

    // The aux reduces a part of the rounds it is grouped into (not necessarily of the first few):
    // those steps carry the samples it accepted into them, and only positive counts.
    let samples: number[] = [];
    await expect
      .poll(
        async () => {
          const { points } = await getJson<Metrics>(request, `/api/v1/experiments/${experimentId}/metrics`);
          samples = points.flatMap((point) => (point.samples === null ? [] : [point.samples]));
          return samples.length;
        },
        { timeout: 90_000, intervals: [2_000] },
      )
      .toBeGreaterThan(0);
    for (const value of samples) expect(value).toBeGreaterThan(0);
    await visitor.reload();
    const samplesChart = visitor.getByTestId("chart-step-samples");
    await expect(samplesChart.getByText(/^[\d,]+ at step [\d,]+ \(target batch [\d,]+\)$/)).toBeVisible();
  });

  await test.step("the leaderboard counts the volunteer's samples", async () => {
    await expect
      .poll(() => leaderboardSamples(request, experimentId, veraName), {
        timeout: 60_000,
        intervals: [2_000],
      })
      .toBeGreaterThan(0);
    await visitor.reload();
    await expect(visitor.getByRole("row").filter({ hasText: veraName })).toBeVisible();
  });

  await test.step("a checkpoint is published and its download matches its SHA-256", async () => {
    let checkpoint: Checkpoint | undefined;
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
        { timeout: 120_000, intervals: [2_000] },
      )
      .toBeGreaterThanOrEqual(CHECKPOINT_EVERY);
    if (checkpoint === undefined) throw new Error("no checkpoint listed");
    expect(checkpoint.sha256).toMatch(/^[0-9a-f]{64}$/);
    // The aux uploaded it: its log names the same bytes (written once the platform has answered,
    // so it may land a moment after the checkpoint is listed).
    const listed = checkpoint;
    await expect
      .poll(
        () =>
          (aux?.filter(recordMatcher("checkpoint uploaded")) ?? []).map(({ step, sha256, sizeBytes }) => ({
            step,
            sha256,
            sizeBytes,
          })),
        { timeout: 10_000 },
      )
      .toContainEqual({ step: listed.step, sha256: listed.sha256, sizeBytes: listed.sizeBytes });

    await visitor.reload();
    const row = visitor.locator(`[data-testid="checkpoint-row"][data-sha256="${checkpoint.sha256}"]`);
    await expect(row).toBeVisible();
    const [download] = await Promise.all([
      visitor.waitForEvent("download"),
      row.getByRole("link", { name: /^Download/ }).click(),
    ]);
    const bytes = await readFile(await download.path());
    expect(bytes.byteLength).toBe(checkpoint.sizeBytes);
    expect(createHash("sha256").update(bytes).digest("hex")).toBe(checkpoint.sha256);

    // The weights alone, as safetensors: named float32 tensors that fill the file exactly.
    const [weights] = await Promise.all([
      visitor.waitForEvent("download"),
      row.getByRole("link", { name: /^safetensors/ }).click(),
    ]);
    expect(weights.suggestedFilename()).toBe(`${experimentId}-step-${checkpoint.step}.safetensors`);
    const file = await readFile(await weights.path());
    const headerLength = Number(file.readBigUInt64LE(0));
    const header = JSON.parse(file.subarray(8, 8 + headerLength).toString("utf8")) as Record<
      string,
      { dtype: string; shape: number[]; data_offsets: [number, number] }
    > & { __metadata__: Record<string, string> };
    const { __metadata__: metadata, ...tensors } = header;
    expect(metadata).toMatchObject({
      barnraise_experiment: experimentId,
      barnraise_step: String(checkpoint.step),
    });
    expect(Object.keys(tensors)).toContain("hidden0.kernel");
    const dataBytes = Object.values(tensors).reduce((sum, tensor) => {
      expect(tensor.dtype).toBe("F32");
      return sum + (tensor.data_offsets[1] - tensor.data_offsets[0]);
    }, 0);
    expect(file.byteLength).toBe(8 + headerLength + dataBytes);
    await expect(visitor.getByTestId("checkpoint-load-snippet")).toContainText("load_file");

    await screenshots(visitor, testInfo, "dashboard");
  });

  await test.step("a ban stops the volunteer's running peers within 30 s", async () => {
    await organizer.reload();
    const entry = organizer.getByTestId(`allowlist-${veraName}`);
    await entry.getByRole("button", { name: `Ban ${veraName}` }).click();
    await expect(
      organizer.getByText(`${veraName} is banned; their nodes are no longer counted.`),
    ).toBeVisible();
    const bannedAt = Date.now();

    // The signed run control names her: her peers read it from the platform or hear it from the
    // swarm within seconds, long before their passes (a minute here) would expire.
    for (const peer of veraPeers) {
      const status = await peer.waitForExit(Math.max(1, bannedAt + 30_000 - Date.now()));
      expect(status, `${peer.name}: ${peer.tail(20)}`).toEqual({ code: PeerExit.banned, signal: null });
      expect(peer.filter((record) => record.code === "BANNED")).not.toHaveLength(0);
    }
    testInfo.annotations.push({
      type: "ban to exit",
      description: `${((Date.now() - bannedAt) / 1000).toFixed(1)} s`,
    });

    // ...and the swarm steps on without them: the aux reports the organizer's peer alone.
    const auxProcess = aux;
    if (auxProcess === undefined) throw new Error("the aux did not start");
    const before = new Set<LogRecord>(auxProcess.records());
    const lastStepBefore = Math.max(
      0,
      ...auxProcess.filter(recordMatcher("metrics posted")).map((record) => Number(record.step)),
    );
    await expect
      .poll(
        () => {
          const posted = auxProcess.filter(recordMatcher("metrics posted", (record) => !before.has(record)));
          return posted.at(-1)?.alivePeers;
        },
        { timeout: 60_000, intervals: [1_000] },
      )
      .toBe(1);
    const { points } = await getJson<Metrics>(request, `/api/v1/experiments/${experimentId}/metrics`);
    const last = points.at(-1);
    expect(last?.step).toBeGreaterThan(lastStepBefore);
    expect(last?.alivePeers).toBe(1);
  });
});
