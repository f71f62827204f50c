import { createHash } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PeerCliProcess, writeEvents, type LogRecord } from "../../peer/test/support/peer-cli-process.ts";
import { startPlatformServer, type PlatformServer } from "../../web/test/support/platform-server.ts";
import { Scrape } from "../../web/test/support/prometheus.ts";

/**
 * The organizer's aux peer as a real process against a running platform, with two volunteers'
 * peers as real processes: the peers find the swarm through the address the aux registered (no
 * `--peer`), and the aux posts each step's metrics, uploads checkpoints, scores them on the test
 * split and helps average.
 */

const AUX_CLI = new URL("../src/cli.ts", import.meta.url).pathname;
const config = {
  model: { kind: "mnist-mlp" as const, hiddenUnits: [32] },
  // Steps of a second or two: time for the aux to learn the model's size and join rounds.
  training: { targetBatchSize: 8192, localBatchSize: 64 },
  optimizer: { name: "adam" as const, learningRate: 0.003 },
  averaging: { matchmakingTimeoutMs: 4_000, allreduceTimeoutMs: 6_000 },
  checkpoints: { everySteps: 4 },
};

let platform: PlatformServer;
let dir: string;
const processes: PeerCliProcess[] = [];

beforeAll(async () => {
  platform = await startPlatformServer({
    datasets: { names: ["mnist"], limit: 6_000, recordsPerShard: 1_000 },
  });
  dir = await mkdtemp(join(tmpdir(), "barnraise-aux-"));
}, 120_000);

afterAll(async () => {
  for (const child of processes) if (child.running) child.kill("SIGKILL");
  await Promise.all(processes.map((child) => child.exited));
  await platform.close();
  await rm(dir, { recursive: true, force: true });
});

function startAux(name: string, token: string, extra: readonly string[] = []): PeerCliProcess {
  const aux = new PeerCliProcess(
    name,
    [
      "--server",
      platform.url.href,
      "--listen",
      "/ip4/127.0.0.1/tcp/0",
      "--identity",
      join(dir, name, "identity.json"),
      ...extra,
    ],
    { BARNRAISE_TOKEN: token },
    AUX_CLI,
  );
  processes.push(aux);
  return aux;
}

function startPeer(name: string, token: string, extra: readonly string[] = []): PeerCliProcess {
  const peer = new PeerCliProcess(
    name,
    [
      ...extra,
      "--server",
      platform.url.href,
      "--backend",
      "wasm",
      "--identity",
      join(dir, name, "identity.json"),
      "--data-dir",
      join(dir, name, "data"),
      "--listen",
      "/ip4/127.0.0.1/tcp/0",
    ],
    { BARNRAISE_TOKEN: token },
  );
  processes.push(peer);
  return peer;
}

async function getJson<T>(path: string): Promise<T> {
  const response = await fetch(new URL(path, platform.url));
  expect(response.status).toBe(200);
  return (await response.json()) as T;
}

describe("barnraise-aux", () => {
  it("refuses a volunteer's token with exit code 10", async () => {
    const experiment = await platform.createExperiment(config);
    const { token } = await platform.addVolunteer(experiment.id, "victor");
    const aux = startAux("aux-with-a-volunteer-token", token);
    expect((await aux.exited).code).toBe(10);
    expect(aux.records.some((r) => typeof r.msg === "string" && r.msg.includes("aux token"))).toBe(true);
  }, 60_000);

  it("bootstraps the swarm, posts each step's metrics, uploads and evaluates checkpoints and helps average", async ({
    onTestFailed,
  }) => {
    onTestFailed(() => {
      writeEvents(processes);
    });
    const experiment = await platform.createExperiment(config);
    const { token } = await platform.addVolunteer(experiment.id, "vera");
    // The first volunteer starts before the organizer's aux: the platform has no peers to give it.
    // Both serve Prometheus metrics on a free loopback port, as a volunteer's --metrics-port does.
    const first = startPeer("vera-1", token, ["--metrics-port", "0"]);
    await first.waitFor((r) => r.msg === "first minibatch contributed", "training alone", 60_000);
    const aux = startAux("aux", await platform.createAuxToken(experiment.id), ["--metrics-port", "0"]);
    await aux.waitFor((r) => r.msg === "registered address", "address registration", 60_000);
    const second = startPeer("vera-2", token);
    // No --peer: the second found the swarm through the aux's registered address at once, the first
    // by asking the platform again while it was alone; so they average together.
    const paired = (r: LogRecord) => r.msg.startsWith("step ") && Number(r.groupSize) >= 2;
    await first.waitFor(paired, "a round with the other peer", 120_000);
    expect(first.records.some((r) => r.msg.startsWith("found the swarm through"))).toBe(true);

    const posts = () => aux.records.filter((r) => r.msg === "metrics posted");
    await aux.waitFor(() => posts().length >= 3, "metrics of three steps", 120_000);
    await aux.waitFor(
      (r) => r.msg === "metrics posted" && r.alivePeers === 2,
      "metrics with both volunteers alive",
      120_000,
    );
    // Each volunteer measured its link against the aux (a speed test) for its share of the
    // all-reduce, and says so. The figure is a measurement (how fast depends on the machine's load),
    // so only its source and that it is a real rate are checked here.
    for (const peer of [first, second]) {
      const link = await peer.waitFor((r) => r.msg.startsWith("link: "), "a link speed test", 60_000);
      expect(link).toMatchObject({ source: "probe", aux: expect.any(String) as unknown });
      const measured = Number(link.uploadBytesPerSecond);
      expect(Number.isFinite(measured) && measured > 0).toBe(true);
    }
    const uploaded = await aux.waitFor((r) => r.msg === "checkpoint uploaded", "a checkpoint", 120_000);
    expect(Number(uploaded.step)).toBeGreaterThanOrEqual(4);

    // Their /metrics, read by the reference Prometheus parser: the volunteer's averaging and the
    // aux's view of the run.
    const scrapeOf = async (process: PeerCliProcess) => {
      const url = String(
        (await process.waitFor((r) => r.msg.startsWith("metrics at "), "metrics", 1_000)).url,
      );
      expect(new URL(url).hostname).toBe("127.0.0.1");
      const response = await fetch(url);
      expect(response.status).toBe(200);
      return Scrape.parse(await response.text());
    };
    const volunteer = await scrapeOf(first);
    expect(volunteer.value("barnraise_step")).toBeGreaterThanOrEqual(4);
    expect(volunteer.value("barnraise_samples_per_second")).toBeGreaterThan(0);
    expect(volunteer.value("barnraise_allreduce_seconds_count")).toBeGreaterThan(0);
    expect(volunteer.value("barnraise_allreduce_bytes_total", { direction: "sent" })).toBeGreaterThan(0);
    expect(volunteer.value("barnraise_allreduce_bytes_total", { direction: "received" })).toBeGreaterThan(0);
    expect(volunteer.value("barnraise_pass_expiry_timestamp_seconds")).toBeGreaterThan(Date.now() / 1000);
    const organizers = await scrapeOf(aux);
    expect(organizers.value("barnraise_step")).toBeGreaterThanOrEqual(4);
    expect(organizers.value("barnraise_peers_online")).toBeGreaterThanOrEqual(1);
    // The checkpointer downloads the state from the trainers.
    expect(organizers.value("barnraise_state_downloads_total", { outcome: "ok" })).toBeGreaterThan(0);
    expect(organizers.value("barnraise_state_download_bytes_total")).toBeGreaterThan(0);

    const metrics = await getJson<{ points: { step: number; loss: number; alivePeers: number }[] }>(
      `api/v1/experiments/${experiment.id}/metrics`,
    );
    expect(metrics.points.length).toBeGreaterThanOrEqual(3);
    for (const point of metrics.points) expect(point.loss).toBeGreaterThan(0);
    expect(metrics.points.at(-1)?.loss).toBeLessThan(metrics.points[0]?.loss ?? 0);

    // It scores the checkpoints it uploads on the test split, and the platform lists the score.
    const evaluated = await aux.waitFor(
      (r) => r.msg === "checkpoint evaluated",
      "a checkpoint's held-out evaluation",
      120_000,
    );
    expect(evaluated).toMatchObject({ metric: "accuracy", samples: expect.any(Number) as unknown });
    // On the WebAssembly backend, as a volunteer's CPU would train: the binaries were found.
    expect(
      aux.records.find((r) => r.msg === "ready to evaluate checkpoints on the held-out split"),
    ).toMatchObject({
      backend: "wasm",
    });
    expect(Number(evaluated.value)).toBeGreaterThan(0.1);

    const { checkpoints } = await getJson<{
      checkpoints: {
        id: string;
        step: number;
        sha256: string;
        downloadUrl: string;
        evaluation: { metric: string; value: number } | null;
      }[];
    }>(`api/v1/experiments/${experiment.id}/checkpoints`);
    expect(checkpoints.find((entry) => entry.id === evaluated.checkpointId)?.evaluation).toEqual(
      expect.objectContaining({ metric: "accuracy", value: evaluated.value }),
    );
    const checkpoint = checkpoints.find((entry) => entry.sha256 === uploaded.sha256);
    expect(checkpoint).toBeDefined();
    const file = await fetch(new URL(checkpoint?.downloadUrl.slice(1) ?? "", platform.url));
    const bytes = new Uint8Array(await file.arrayBuffer());
    expect(createHash("sha256").update(bytes).digest("hex")).toBe(uploaded.sha256);

    // The leaderboard credits the volunteer's samples and the organizer's aux for the bytes it reduced.
    await expect
      .poll(
        async () => {
          const { entries } = await getJson<{
            entries: { username: string; samples: number; bytesAggregated: number }[];
          }>(`api/v1/experiments/${experiment.id}/leaderboard`);
          const vera = entries.find((entry) => entry.username === "vera");
          const helper = entries.find((entry) => entry.username !== "vera");
          return (vera?.samples ?? 0) > 0 && (helper?.bytesAggregated ?? 0) > 0;
        },
        { timeout: 60_000, interval: 1_000 },
      )
      .toBe(true);

    // The run has no last step: the volunteers stop with Ctrl-C, then the organizer's aux.
    for (const peer of [first, second]) {
      peer.kill("SIGINT");
      expect((await peer.exited).code).toBe(0);
    }
    aux.kill("SIGINT");
    expect((await aux.exited).code).toBe(0);
  }, 300_000);

  it("scores the checkpoint it resumes from when the aux before it left that one unscored", async ({
    onTestFailed,
  }) => {
    onTestFailed(() => {
      writeEvents(processes);
    });
    const experiment = await platform.createExperiment(config);
    const auxToken = await platform.createAuxToken(experiment.id);
    // The organizer's first aux does not evaluate: its checkpoints stay unscored.
    const first = startAux("aux-not-evaluating", auxToken, ["--no-evaluate"]);
    await first.waitFor((r) => r.msg === "registered address", "address registration", 60_000);
    const { token } = await platform.addVolunteer(experiment.id, "rita");
    const peer = startPeer("rita-1", token);
    const uploaded = await first.waitFor(
      (r) => r.msg === "checkpoint uploaded" && Number(r.step) >= 4,
      "a checkpoint",
      180_000,
    );
    first.kill("SIGINT");
    expect((await first.exited).code).toBe(0);
    peer.kill("SIGINT");
    expect((await peer.exited).code).toBe(0);
    expect(first.records.some((r) => r.msg === "checkpoint evaluated")).toBe(false);
    type Listed = { id: string; step: number; evaluation: { metric: string; value: number } | null };
    const before = await getJson<{ checkpoints: Listed[] }>(
      `api/v1/experiments/${experiment.id}/checkpoints`,
    );
    const latest = before.checkpoints.reduce((a, b) => (b.step > a.step ? b : a));
    expect(latest.step).toBeGreaterThanOrEqual(Number(uploaded.step));
    expect(before.checkpoints.every((entry) => entry.evaluation === null)).toBe(true);

    // A restarted aux, with no volunteer left: it resumes from the latest checkpoint and scores it.
    const second = startAux("aux-restarted", auxToken);
    const evaluated = await second.waitFor((r) => r.msg === "checkpoint evaluated", "an evaluation", 120_000);
    expect(evaluated).toMatchObject({ checkpointId: latest.id, step: latest.step, metric: "accuracy" });
    const after = await getJson<{ checkpoints: Listed[] }>(`api/v1/experiments/${experiment.id}/checkpoints`);
    expect(after.checkpoints.find((entry) => entry.id === latest.id)?.evaluation).toMatchObject({
      metric: "accuracy",
      value: Number(evaluated.value),
    });
    second.kill("SIGINT");
    expect((await second.exited).code).toBe(0);
  }, 300_000);

  it("checkpoints a finished run's last step, which the peer stays to serve before it leaves", async ({
    onTestFailed,
  }) => {
    onTestFailed(() => {
      writeEvents(processes);
    });
    // The last step (3) comes before everySteps (4): only the run's end makes it due, and the
    // platform has no checkpoint at all while the peer waits for it.
    const experiment = await platform.createExperiment({
      ...config,
      training: { ...config.training, maxSteps: 3 },
    });
    const aux = startAux("aux-of-a-finished-run", await platform.createAuxToken(experiment.id));
    await aux.waitFor((r) => r.msg === "registered address", "address registration", 60_000);
    const { token } = await platform.addVolunteer(experiment.id, "fred");
    const peer = startPeer("fred-1", token);
    expect((await peer.exited).code).toBe(0);
    expect(peer.records.some((r) => r.msg === "the run reached its last step" && Number(r.step) === 3)).toBe(
      true,
    );
    const { checkpoints } = await getJson<{ checkpoints: { step: number }[] }>(
      `api/v1/experiments/${experiment.id}/checkpoints`,
    );
    expect(checkpoints.map((entry) => entry.step)).toEqual([3]);
    expect(peer.records.some((r) => typeof r.msg === "string" && r.msg.startsWith("no checkpoint of"))).toBe(
      false,
    );
    aux.kill("SIGINT");
    expect((await aux.exited).code).toBe(0);
  }, 300_000);
});
