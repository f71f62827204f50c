/**
 * Swarm throughput of real `barnraise-peer` processes on loopback, for 1, 2 and 4 peers, and each
 * peer's time from start to its first contributed sample.
 *
 *   node bench/peer-swarm-throughput.ts [--peers 1,2,4] [--warmup-steps 3] [--steps 20]
 *       [--target-batch-size 1024] [--local-batch-size 32] [--backend wasm] [--timeout-s 300]
 *       [--log-dir DIR]
 *
 * One platform (bench/support/peer-platform.ts: the real route handlers over HTTP on 127.0.0.1,
 * SQLite, the MNIST shards) serves every run. For each N in --peers: a fresh experiment training
 * mnist-mlp (the preset's default 784 → 128 → 64 → 10, Adam, the given batch sizes, every other
 * setting at its default), N volunteers with their own tokens, identities and empty shard caches,
 * and N `barnraise-peer --json --backend <b> --listen /ip4/127.0.0.1/tcp/0` processes; the first
 * starts alone, the others together once it listens, each with `--peer` of the first.
 *
 * What is measured, from the JSON records of the first peer: once every peer has contributed its
 * first minibatch, --warmup-steps more collaborative steps pass, then a window of --steps steps is
 * timed between the "step" records that open and close it (record timestamps). Swarm throughput =
 * steps × targetBatchSize / window seconds. The peers are stopped (SIGINT, then SIGKILL) after it.
 *
 * Throughput table: "samples/s" the swarm throughput; "averaged/s" the samples the window's steps
 * really averaged (Σ of the step records' `samples`, the first peer's groups: a step may fire on an
 * estimate of the global progress below targetBatchSize); "speed-up" over N = 1; "efficiency"
 * speed-up / N; "groups" the smallest and largest all-reduce group in the window (N when every
 * peer averaged every step); "Σ local samples/s" the sum of the peers' own training rates from their
 * last status records (compute capacity, before averaging and waiting). On a machine with fewer
 * cores than peers (this process serves the platform too) the peers share the cores and cannot scale.
 *
 * Start-up table, per peer: "since start" the peer's own `secondsSinceStart` in its "first minibatch
 * contributed" record (from the CLI's entry point: join, backend, model, shard download, swarm);
 * "since spawn" the same moment from when this bench spawned the process (Node's start and module
 * loading included); the target is 60 s.
 *
 * --timeout-s bounds each run from its first spawn to the window's last step; a run that fails (a
 * peer exits, a timeout) is reported with the peers' last log lines, and the bench exits with 1.
 * --log-dir keeps every peer's JSON records (`<dir>/<peer>.jsonl`) for a closer look.
 */
import { rmSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import { availableParallelism, loadavg } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { PeerCliProcess, type LogRecord } from "../apps/peer/test/support/peer-cli-process.ts";
import { parseBackendChoice } from "@barnraise/models";
import { onBenchExit } from "./support/peer-cleanup.ts";
import { startBenchPlatform, type BenchPlatform } from "./support/peer-platform.ts";
import { firstLine, formatCount, formatTable } from "./support/peer-table.ts";

const FIRST_SAMPLE_TARGET_SECONDS = 60;
/** How long a peer may take to listen, and to stop after SIGINT before it is killed. */
const LISTEN_TIMEOUT_MS = 120_000;
const STOP_TIMEOUT_MS = 20_000;

const { values: flags } = parseArgs({
  options: {
    peers: { type: "string", default: "1,2,4" },
    "warmup-steps": { type: "string", default: "3" },
    steps: { type: "string", default: "20" },
    "target-batch-size": { type: "string", default: "1024" },
    "local-batch-size": { type: "string", default: "32" },
    backend: { type: "string", default: "wasm" },
    "timeout-s": { type: "string", default: "300" },
    "log-dir": { type: "string" },
  },
});

function positiveInteger(name: string, text: string, min = 1): number {
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value < min) {
    throw new RangeError(`--${name} must be an integer ≥ ${min}, got ${JSON.stringify(text)}`);
  }
  return value;
}

const peerCounts = flags.peers.split(",").map((text) => positiveInteger("peers", text));
const warmupSteps = positiveInteger("warmup-steps", flags["warmup-steps"], 0);
const windowSteps = positiveInteger("steps", flags.steps);
const targetBatchSize = positiveInteger("target-batch-size", flags["target-batch-size"]);
const localBatchSize = positiveInteger("local-batch-size", flags["local-batch-size"]);
const backend = parseBackendChoice(flags.backend);
const timeoutMs = positiveInteger("timeout-s", flags["timeout-s"]) * 1000;

/** A peer's first contributed minibatch; undefined times when it never contributed. */
interface FirstSample {
  readonly peer: string;
  readonly sinceStart?: number;
  readonly sinceSpawn?: number;
}

interface SwarmWindow {
  readonly steps: number;
  readonly seconds: number;
  readonly samplesPerSecond: number;
  /** Σ the window's steps' `samples` (what the first peer's groups really averaged) per second. */
  readonly averagedPerSecond: number;
  readonly minGroup: number;
  readonly maxGroup: number;
  readonly localSamplesPerSecond: number;
}

interface RunResult {
  readonly peers: number;
  readonly firstSamples: readonly FirstSample[];
  readonly window?: SwarmWindow;
  readonly failure?: string;
}

interface RunningPeer {
  readonly process: PeerCliProcess;
  readonly spawnedAt: number;
  readonly forget: () => void;
}

const isStepRecord = (record: LogRecord): record is LogRecord & { step: number; time: number } =>
  record.msg.startsWith("step ") && typeof record.step === "number" && typeof record.time === "number";

function numberField(record: LogRecord, field: string): number {
  const value = record[field];
  if (typeof value !== "number") {
    throw new Error(`record "${record.msg}" has no numeric "${field}": ${JSON.stringify(record)}`);
  }
  return value;
}

function startPeer(
  platform: BenchPlatform,
  runDir: string,
  name: string,
  token: string,
  bootstrap: readonly string[],
): RunningPeer {
  const spawnedAt = Date.now();
  const peer = new PeerCliProcess(
    name,
    [
      "--server",
      platform.url.href,
      "--backend",
      backend,
      "--identity",
      join(runDir, name, "identity.json"),
      "--data-dir",
      join(runDir, name, "data"),
      "--listen",
      "/ip4/127.0.0.1/tcp/0",
      ...bootstrap.flatMap((address) => ["--peer", address]),
    ],
    // The token travels in the environment, as the CLI's help recommends.
    { BARNRAISE_TOKEN: token },
  );
  const forget = onBenchExit(() => {
    if (peer.running) peer.kill("SIGKILL");
  });
  return { process: peer, spawnedAt, forget };
}

/** SIGINT (finish the round in flight and leave), then SIGKILL whatever is still running. */
async function stopPeers(peers: readonly RunningPeer[]): Promise<void> {
  for (const { process: peer } of peers) if (peer.running) peer.kill("SIGINT");
  const exited = Promise.all(peers.map(({ process: peer }) => peer.exited));
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, STOP_TIMEOUT_MS);
  });
  await Promise.race([exited, late]);
  clearTimeout(timer);
  for (const { process: peer } of peers) if (peer.running) peer.kill("SIGKILL");
  await exited;
  for (const { forget } of peers) forget();
}

async function measureSwarm(platform: BenchPlatform, n: number): Promise<RunResult> {
  const experimentId = `swarm-${n}`;
  await platform.createExperiment(experimentId, {
    model: { kind: "mnist-mlp" },
    training: { targetBatchSize, localBatchSize },
    optimizer: { name: "adam" },
  });
  const names = Array.from({ length: n }, (_, i) => `${experimentId}-p${i}`);
  const tokens = await Promise.all(names.map((name) => platform.addVolunteer(experimentId, name)));
  const peers: RunningPeer[] = [];
  const deadline = Date.now() + timeoutMs;
  const left = (): number => Math.max(1, deadline - Date.now());
  try {
    await launch(platform, join(platform.directory, experimentId), names, tokens, peers);
    await Promise.all(
      peers.map(({ process: peer }) => peer.waitFor(isFirstContribution, "first contribution", left())),
    );
    const window = await timeWindow(peers, left);
    return { peers: n, firstSamples: firstSamplesOf(peers), window };
  } catch (error) {
    console.log(`  N=${n}: FAILED: ${firstLine(error)}`);
    for (const { process: peer } of peers) {
      console.log(`  --- ${peer.name} (last lines):\n${peer.transcript()}`);
    }
    if (platform.errors.length > 0) {
      console.log(`  --- platform errors: ${platform.errors.map(firstLine).join("; ")}`);
    }
    return { peers: n, firstSamples: firstSamplesOf(peers), failure: firstLine(error) };
  } finally {
    await stopPeers(peers);
    if (flags["log-dir"] !== undefined) await saveLogs(flags["log-dir"], peers);
  }
}

/**
 * Starts the first peer, waits until it listens, then starts the others with `--peer` of it. Each
 * peer is pushed to `peers` as soon as it is spawned, so the caller stops it whatever happens next.
 */
async function launch(
  platform: BenchPlatform,
  runDir: string,
  names: readonly string[],
  tokens: readonly string[],
  peers: RunningPeer[],
): Promise<void> {
  const [firstName, ...otherNames] = names;
  const [firstToken, ...otherTokens] = tokens;
  if (firstName === undefined || firstToken === undefined) throw new Error("no peers to start");
  const first = startPeer(platform, runDir, firstName, firstToken, []);
  peers.push(first);
  const listening = await first.process.waitFor((r) => r.msg === "listening", "listening", LISTEN_TIMEOUT_MS);
  const addresses = listening.addresses;
  if (!Array.isArray(addresses) || !addresses.every((a) => typeof a === "string")) {
    throw new Error(`the first peer's "listening" record has no addresses: ${JSON.stringify(listening)}`);
  }
  otherNames.forEach((name, i) => {
    peers.push(startPeer(platform, runDir, name, otherTokens[i] ?? "", addresses));
  });
  console.log(`  ${names.length} peer(s) started; waiting for every first contribution`);
}

/**
 * Times the window on the first peer's "step" records: --warmup-steps after the step it had
 * applied when every peer had contributed, then --steps more.
 */
async function timeWindow(peers: readonly RunningPeer[], left: () => number): Promise<SwarmWindow> {
  const recorder = peers[0]?.process;
  if (recorder === undefined) throw new Error("no peers");
  const opens = recorder.latestStep() + warmupSteps;
  const closes = opens + windowSteps;
  const open = await recorder.waitFor((r) => isStepRecord(r) && r.step >= opens, `step ${opens}`, left());
  const openStep = numberField(open, "step");
  console.log(`  every peer contributed; timing steps ${openStep}…${closes}`);
  const close = await recorder.waitFor((r) => isStepRecord(r) && r.step >= closes, `step ${closes}`, left());
  const closeStep = numberField(close, "step");
  const closeTime = numberField(close, "time");
  const seconds = (closeTime - numberField(open, "time")) / 1000;
  const inWindow = recorder.records.filter(
    (r) => isStepRecord(r) && r.step > openStep && r.step <= closeStep,
  );
  const groups = inWindow.map((r) => numberField(r, "groupSize"));
  const averaged = inWindow.reduce((sum, r) => sum + numberField(r, "samples"), 0);
  // Each peer's own training rate, from its last status record up to the window's end.
  const localRates = peers.map(({ process: peer }) => {
    const status = peer.records.findLast(
      (r) =>
        r.msg === "status" &&
        typeof r.localSamplesPerSecond === "number" &&
        numberField(r, "time") <= closeTime,
    );
    return typeof status?.localSamplesPerSecond === "number" ? status.localSamplesPerSecond : NaN;
  });
  const steps = closeStep - openStep;
  return {
    steps,
    seconds,
    samplesPerSecond: (steps * targetBatchSize) / seconds,
    averagedPerSecond: averaged / seconds,
    minGroup: Math.min(...groups),
    maxGroup: Math.max(...groups),
    localSamplesPerSecond: localRates.reduce((sum, rate) => sum + rate, 0),
  };
}

const isFirstContribution = (record: LogRecord): boolean => record.msg === "first minibatch contributed";

/** Each peer's first contribution as its records tell it (also after a failed run). */
function firstSamplesOf(peers: readonly RunningPeer[]): FirstSample[] {
  return peers.map(({ process: peer, spawnedAt }) => {
    const record = peer.records.find(isFirstContribution);
    if (record === undefined) return { peer: peer.name };
    return {
      peer: peer.name,
      sinceStart: numberField(record, "secondsSinceStart"),
      sinceSpawn: (numberField(record, "time") - spawnedAt) / 1000,
    };
  });
}

/** Every record (and any other output line) of each peer, one file per peer. */
async function saveLogs(directory: string, peers: readonly RunningPeer[]): Promise<void> {
  await mkdir(directory, { recursive: true });
  for (const { process: peer } of peers) {
    const lines = [...peer.records.map((record) => JSON.stringify(record)), ...peer.otherOutput];
    await writeFile(join(directory, `${peer.name}.jsonl`), `${lines.join("\n")}\n`);
  }
}

function printThroughput(results: readonly RunResult[]): void {
  const base = results.find((r) => r.peers === 1)?.window?.samplesPerSecond;
  const header = [
    "peers",
    "steps",
    "window s",
    "samples/s",
    "averaged/s",
    "speed-up",
    "efficiency",
    "groups",
    "Σ local samples/s",
  ];
  const rows = results.map(({ peers, window }) => {
    if (window === undefined) return [String(peers), "failed", ...header.slice(2).map(() => "-")];
    const speedUp = base === undefined ? undefined : window.samplesPerSecond / base;
    return [
      String(peers),
      String(window.steps),
      window.seconds.toFixed(1),
      formatCount(window.samplesPerSecond),
      formatCount(window.averagedPerSecond),
      speedUp === undefined ? "-" : `${speedUp.toFixed(2)}×`,
      speedUp === undefined ? "-" : `${((speedUp / peers) * 100).toFixed(0)}%`,
      window.minGroup === window.maxGroup ? String(window.minGroup) : `${window.minGroup}–${window.maxGroup}`,
      formatCount(window.localSamplesPerSecond),
    ];
  });
  for (const line of formatTable(header, rows, 0)) console.log(line);
  for (const { peers, failure } of results) {
    if (failure !== undefined) console.log(`N=${peers} failed: ${failure}`);
  }
}

function printFirstSamples(results: readonly RunResult[]): void {
  const seconds = (value: number | undefined): string => (value === undefined ? "-" : value.toFixed(1));
  const rows = results.flatMap(({ peers, firstSamples }) =>
    firstSamples.map((sample) => [
      String(peers),
      sample.peer,
      seconds(sample.sinceStart),
      seconds(sample.sinceSpawn),
      sample.sinceSpawn !== undefined && sample.sinceSpawn <= FIRST_SAMPLE_TARGET_SECONDS ? "yes" : "NO",
    ]),
  );
  const header = ["N", "peer", "since start s", "since spawn s", `≤ ${FIRST_SAMPLE_TARGET_SECONDS} s`];
  for (const line of formatTable(header, rows, 2)) console.log(line);
  const all = results.flatMap((r) => r.firstSamples);
  const times = all.flatMap((sample) => (sample.sinceSpawn === undefined ? [] : [sample.sinceSpawn]));
  const missing = all.length - times.length;
  const worst = Math.max(...times);
  const met = missing === 0 && times.length > 0 && worst <= FIRST_SAMPLE_TARGET_SECONDS;
  console.log(
    `time to first contributed sample: ${times.length > 0 ? `worst ${worst.toFixed(1)} s from spawn` : "none"} ` +
      `over ${times.length} peer(s)${missing > 0 ? `, ${missing} never contributed` : ""} ` +
      `(target ${FIRST_SAMPLE_TARGET_SECONDS} s: ${met ? "met" : "MISSED"})`,
  );
}

const cores = availableParallelism();
console.log(
  `Node ${process.version}, ${cores} cores (os.availableParallelism), load average ${loadavg()[0]?.toFixed(1)}; ` +
    `mnist-mlp default, Adam, targetBatchSize ${targetBatchSize}, local batch ${localBatchSize}, --backend ${backend}; ` +
    `window of ${windowSteps} steps after ${warmupSteps} warm-up steps`,
);
console.log("starting the platform (migrations, MNIST shards) …");
const platform = await startBenchPlatform({
  datasets: { names: ["mnist"], limit: 12_000, recordsPerShard: 1_000 },
});
const forgetPlatform = onBenchExit(() => {
  rmSync(platform.directory, { recursive: true, force: true });
});
const results: RunResult[] = [];
try {
  for (const n of peerCounts) {
    console.log(`N=${n}:`);
    results.push(await measureSwarm(platform, n));
  }
} finally {
  await platform.close();
  forgetPlatform();
}

console.log();
printThroughput(results);
if (peerCounts.some((n) => n > cores)) {
  console.log(
    `note: ${cores} cores for up to ${Math.max(...peerCounts)} peer processes plus this one (the platform): ` +
      "beyond the core count the peers share CPUs, so throughput cannot scale there.",
  );
}
console.log();
printFirstSamples(results);
if (results.some((r) => r.failure !== undefined)) process.exitCode = 1;
