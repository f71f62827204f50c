/**
 * Share of wall time spent computing, for DeDLOC and for DiLoCo, with peers on slow links.
 *
 *   node bench/diloco-utilization.ts [--variants dedloc,diloco,diloco-overlap] [--peers 4] [--mbit 10]
 *       [--rtt-ms 0] [--model mnist-mlp] [--h 100] [--target-batch-size 256] [--local-batch-size 32]
 *       [--rounds 4] [--dedloc-rounds 40] [--backend wasm] [--data-dir DIR]
 *
 * Needs root (netlab); without it the bench says why and exits 0. BENCH_DEBUG=1 prints each variant's
 * raw reports and writes each peer's stderr (its log at BENCH_LOG's level, default warn, and every
 * optimizer event as a JSON line) to $TMPDIR/diloco-util-<variant>-p<k>.log. For each variant: one lab with
 * --peers hosts, every link shaped to --mbit Mbit/s up and down (tbf; --rtt-ms adds latency, a
 * quarter of it on each link each way), one peer process per host (bench/support/diloco-peer.ts):
 * a `Swarm`, a `CollaborativeOptimizer`, the real model and the real `Trainer` reading its own
 * shuffle of the prepared shards, all from the same initial parameters: --model mnist-mlp (784 → 128
 * → 64 → 10 on MNIST) or albert-mlm (the small ALBERT of the quality bench on the Brown corpus,
 * whose minibatches are heavier). --h, --target-batch-size and --local-batch-size default to the
 * model's bench settings (bench/support/diloco-setup.ts), except H = 100 for both.
 * The variants:
 *   dedloc          target batch T, compression "adaptive" (blockwise8 at this size);
 *   diloco          rounds of H × T samples, blockwise8, the outer all-reduce blocking training;
 *   diloco-overlap  the same with `delayedParameterUpdates`: the all-reduce runs while the next
 *                   round's inner steps go on (the target: ≥ 90 % of wall time computing).
 * The peers are started together once fully meshed. Each measures its own window: from the moment
 * it first reports epoch W to the moment it first reports epoch W + R (W = 1 warm-up round for
 * DiLoCo and 5 for DeDLOC; R = --rounds for DiLoCo, --dedloc-rounds for DeDLOC), so the window holds
 * R whole rounds of computing and averaging.
 *
 * Utilization of a peer = seconds inside `model.computeGradients` in its window ÷ the window's wall
 * seconds. The table shows the mean over peers and the lowest and highest peer; beside it, the
 * shares of wall time spent on the rest of each minibatch's local work, outside computeGradients:
 * "+ step" in `optimizer.accumulate` (DiLoCo's inner Adam step, DeDLOC's gradient sum, with the
 * progress report each makes), "+ load" in `model.setParameters` (with DiLoCo the trainer reloads
 * the working parameters before every minibatch), "+ data" waiting for the next minibatch, and
 * "local work", all four with computeGradients (the rest is averaging in the foreground, waiting
 * for a group, and the trainer's loop and event loop); "swarm wait", the share inside
 * `optimizer.maybeStep`, where the training loop waits on a round in the foreground, on matchmaking
 * or on a state load (what overlapping is meant to remove); then the seconds per round, the samples per round (against its target),
 * the swarm's samples per second in the windows (Σ over peers of the samples each computed in its
 * window ÷ the mean window), bytes each peer sent per round, the rounds that failed, the cores the
 * peer processes used in their windows and the cores the whole machine kept busy meanwhile (a
 * machine shared with other work shows more there than the peers used). On a machine
 * with fewer cores than peers the processes share the cores, so a minibatch takes longer in wall
 * time than on a peer of its own; computing still counts as computing, and the share of wall time
 * spent waiting on the network is what the table is about.
 */
import { writeFileSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { parseExperimentConfig } from "@barnraise/protocol";
import { z } from "zod";
import { netlabAvailable, payloadBytesPerSecond, type Host } from "../packages/netlab/src/index.ts";
import { TestAuthority } from "../packages/swarm/test/support/swarm-fixtures.ts";
import { firstLine, log, withLab } from "./support/allreduce-peer.ts";
import {
  failedSchema,
  meshedSchema,
  readySchema,
  reportSchema,
  type DilocoPeerReport,
} from "./support/diloco-peer.ts";
import {
  labConfig,
  parseVariants,
  positive,
  send,
  spawnPeer,
  stopAll,
  waitLine,
  type PeerOptions,
  type RunningPeer,
} from "./support/diloco-lab.ts";
import {
  BENCH_MODELS,
  busyCores,
  DEFAULT_DATA_DIR,
  isBenchModel,
  machineJiffies,
  prepareBenchDataset,
} from "./support/diloco-setup.ts";
import { formatCount, formatTable } from "./support/peer-table.ts";

const UTILIZATION_TARGET = 0.9;

const VARIANTS = ["dedloc", "diloco", "diloco-overlap"] as const;
type Variant = (typeof VARIANTS)[number];

const { values: flags } = parseArgs({
  options: {
    variants: { type: "string", default: VARIANTS.join(",") },
    peers: { type: "string", default: "4" },
    mbit: { type: "string", default: "10" },
    "rtt-ms": { type: "string", default: "0" },
    model: { type: "string", default: "mnist-mlp" },
    h: { type: "string", default: "100" },
    "target-batch-size": { type: "string" },
    rounds: { type: "string", default: "4" },
    "dedloc-rounds": { type: "string", default: "40" },
    "local-batch-size": { type: "string" },
    backend: { type: "string", default: "wasm" },
    "data-dir": { type: "string", default: DEFAULT_DATA_DIR },
  },
});

const variants = parseVariants(flags.variants, VARIANTS);
const peerCount = positive("peers", flags.peers, 2);
const mbit = positive("mbit", flags.mbit, 0.1);
const rttMs = positive("rtt-ms", flags["rtt-ms"], 0);
const h = positive("h", flags.h);
if (!isBenchModel(flags.model)) {
  throw new RangeError(`--model: unknown model ${flags.model} (${Object.keys(BENCH_MODELS).join(", ")})`);
}
const model = flags.model;
const bench = {
  ...BENCH_MODELS[model],
  targetBatchSize: positive(
    "target-batch-size",
    flags["target-batch-size"] ?? String(BENCH_MODELS[model].targetBatchSize),
  ),
  localBatchSize: positive(
    "local-batch-size",
    flags["local-batch-size"] ?? String(BENCH_MODELS[model].localBatchSize),
  ),
};
const dilocoRounds = positive("rounds", flags.rounds);
const dedlocRounds = positive("dedloc-rounds", flags["dedloc-rounds"]);

interface Row {
  variant: Variant;
  reports: DilocoPeerReport[];
  /** Cores the whole machine kept busy while the peers trained (other processes included). */
  machineCores: number;
  stopped?: string;
}

async function measure(variant: Variant): Promise<Row> {
  const row: Row = { variant, reports: [], machineCores: NaN };
  try {
    await run(variant, row);
  } catch (error) {
    row.stopped = firstLine(error);
    log(`  ${variant}: stopped: ${row.stopped}`);
  }
  return row;
}

async function run(variant: Variant, row: Row): Promise<void> {
  await withLab("dlutil", async (lab) => {
    const delay = rttMs > 0 ? { delayMs: rttMs / 4 } : {};
    const hosts = await Promise.all(
      Array.from({ length: peerCount }, (_, i) =>
        lab.addHost({ name: `p${i}`, uploadMbit: mbit, downloadMbit: mbit, ...delay }),
      ),
    );
    const config = labConfig(variant, bench, h);
    const dedloc = variant === "dedloc";
    const warmupRounds = dedloc ? 5 : 1;
    const rounds = dedloc ? dedlocRounds : dilocoRounds;
    const options: PeerOptions = {
      authority: new TestAuthority(`bench-diloco-${variant}`),
      config,
      bytesPerSecond: payloadBytesPerSecond(mbit),
      peers: peerCount,
      dataDir: flags["data-dir"],
      backend: flags.backend,
      warmupRounds,
      rounds,
    };
    const spawn = (host: Host, index: number, bootstrap: string[]) =>
      spawnPeer(host, index, bootstrap, options);
    const peers: RunningPeer[] = [];
    try {
      const [firstHost, ...otherHosts] = hosts;
      if (firstHost === undefined) throw new Error("no hosts");
      const first = spawn(firstHost, 0, []);
      peers.push(first);
      const bootstrap = (await waitLine(first, readySchema, 60_000)).multiaddrs;
      otherHosts.forEach((host, k) => peers.push(spawn(host, k + 1, bootstrap)));
      await Promise.all(peers.map((peer) => waitLine(peer, meshedSchema, 120_000)));
      const target = parseExperimentConfig(config).training.targetBatchSize;
      log(
        `  ${variant}: ${peerCount} peers meshed; round target ${formatCount(target)} samples, ` +
          `${warmupRounds} warm-up + ${rounds} measured rounds`,
      );
      const startAt = Date.now() + 1_000;
      for (const peer of peers) send(peer, { cmd: "train", startAt });
      const before = machineJiffies();
      const outcome = z.union([reportSchema, failedSchema]);
      const timeoutMs = 600_000;
      const answers = await Promise.all(peers.map((peer) => waitLine(peer, outcome, timeoutMs)));
      row.machineCores = busyCores(before, machineJiffies());
      row.reports = answers.map((answer, k) => {
        if (answer.type === "failed") {
          const stderr = peers[k]?.watch.stderr.slice(-2000) ?? "";
          throw new Error(`peer ${k} failed: ${answer.message}\n${stderr}`);
        }
        return answer;
      });
    } finally {
      await stopAll(peers);
      if (process.env.BENCH_DEBUG !== undefined) {
        peers.forEach((peer, k) => {
          writeFileSync(join(tmpdir(), `diloco-util-${variant}-p${k}.log`), peer.watch.stderr);
        });
      }
    }
  });
}

const started = performance.now();
const available = await netlabAvailable();
if (!available.ok) {
  console.log(
    `SKIPPED: the netns lab cannot run on this machine (${available.reason}); it needs root, iproute2 and tc.`,
  );
  process.exit(0);
}
log(
  `DiLoCo utilization: ${peerCount} peers on ${mbit} Mbit/s links${rttMs > 0 ? `, ${rttMs} ms round trip` : ""}, ` +
    `${model}, T = ${bench.targetBatchSize}, H = ${h}, local batch ${bench.localBatchSize}, backend ${flags.backend}, ${availableParallelism()} cores`,
);
log(`preparing ${model}'s dataset in ${flags["data-dir"]}`);
await prepareBenchDataset(flags["data-dir"], model);
const rows: Row[] = [];
for (const variant of variants) rows.push(await measure(variant));

const mean = (values: readonly number[]): number => values.reduce((sum, v) => sum + v, 0) / values.length;
const table = rows.map(({ variant, reports, machineCores }) => {
  if (reports.length === 0) return [variant, ...Array.from({ length: 16 }, () => "-")];
  const windows = reports.map((r) => (r.windowEnd - r.windowStart) / 1000);
  const share = (seconds: (r: DilocoPeerReport) => number): number[] =>
    reports.map((r, k) => seconds(r) / (windows[k] ?? NaN));
  const utilization = share((r) => r.computeSeconds);
  const percent = (values: readonly number[]): string => `${(mean(values) * 100).toFixed(1)}%`;
  const rounds = variant === "dedloc" ? dedlocRounds : dilocoRounds;
  const meanUtilization = mean(utilization);
  return [
    variant,
    `${(meanUtilization * 100).toFixed(1)}%`,
    `${(Math.min(...utilization) * 100).toFixed(1)}–${(Math.max(...utilization) * 100).toFixed(1)}%`,
    variant === "dedloc" ? "-" : meanUtilization >= UTILIZATION_TARGET ? "yes" : "NO",
    percent(share((r) => r.innerStepSeconds)),
    percent(share((r) => r.loadSeconds)),
    percent(share((r) => r.dataSeconds)),
    percent(share((r) => r.computeSeconds + r.innerStepSeconds + r.loadSeconds + r.dataSeconds)),
    percent(share((r) => r.swarmSeconds)),
    (mean(windows) / rounds).toFixed(2),
    `${formatCount(reports.reduce((sum, r) => sum + r.samples, 0) / rounds)} (${formatCount(variant === "dedloc" ? bench.targetBatchSize : h * bench.targetBatchSize)})`,
    formatCount(reports.reduce((sum, r) => sum + r.samples, 0) / mean(windows)),
    formatCount(mean(reports.map((r) => r.bytesSent / Math.max(1, r.steps)))),
    String(reports.reduce((sum, r) => sum + r.failedRounds, 0)),
    (reports.reduce((sum, r) => sum + r.cpuSeconds, 0) / mean(windows)).toFixed(2),
    machineCores.toFixed(2),
    mean(reports.map((r) => r.runSeconds)).toFixed(0),
  ];
});
if (process.env.BENCH_DEBUG !== undefined) for (const row of rows) console.log(JSON.stringify(row));
console.log();
const header = [
  "variant",
  "utilization",
  "min–max",
  "≥ 90 %",
  "+ step",
  "+ load",
  "+ data",
  "local work",
  "swarm wait",
  "s/round",
  "samples/round",
  "samples/s",
  "B sent/round",
  "failed",
  "peers CPU",
  "machine",
  "run s",
];
for (const line of formatTable(header, table)) console.log(line);
for (const row of rows) if (row.stopped !== undefined) console.log(`${row.variant}: stopped: ${row.stopped}`);
for (const { variant, reports } of rows) {
  const reasons = new Map<string, number>();
  for (const report of reports) {
    for (const [reason, count] of Object.entries(report.failureReasons)) {
      reasons.set(reason, (reasons.get(reason) ?? 0) + count);
    }
  }
  if (reasons.size > 0) {
    console.log(
      `${variant}: failed rounds by reason: ${[...reasons].map(([r, n]) => `${r} × ${n}`).join(", ")}`,
    );
  }
}
console.log(
  `utilization: s in computeGradients ÷ wall s over each peer's measured window, mean over ${peerCount} peers ` +
    `(target ≥ ${UTILIZATION_TARGET * 100} % for diloco-overlap). + step: share in optimizer.accumulate (inner step or ` +
    `gradient sum); + load: in model.setParameters; + data: waiting for the next minibatch (the event loop runs ` +
    `background rounds and RPCs meanwhile); local work: the four together; swarm wait: in optimizer.maybeStep, the ` +
    `training loop waiting on rounds, matchmaking or state loads. ` +
    `samples/round: the samples the peers computed in their windows ÷ the rounds in them, with the round's target ` +
    `in parentheses (T for dedloc, H × T for diloco). samples/s: the swarm's, in the windows. B sent/round: per peer. peers CPU: cores the peer processes used in their ` +
    `windows; machine: cores the whole machine kept busy while they trained (more: other processes ran too). ` +
    `run s: from the start to the window's end. ` +
    `Wall time ${((performance.now() - started) / 1000).toFixed(0)} s.`,
);
process.exitCode = rows.some((row) => row.stopped !== undefined) ? 1 : 0;
