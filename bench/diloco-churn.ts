/**
 * Utilization under churn: the share of wall time the swarm's places spend computing while one peer
 * is killed and a new one joins in its place every interval, against the same swarm without churn,
 * measured in one run.
 *
 *   node bench/diloco-churn.ts [--variants diloco-overlap,dedloc] [--peers 4] [--mbit 10]
 *       [--churn-every-s 60] [--churns 4] [--warmup-s 20] [--model mnist-mlp] [--h 100]
 *       [--local-batch-size 32] [--backend wasm] [--data-dir DIR]
 *
 * Needs root (netlab); without it the bench says why and exits 0. One lab per variant with --peers
 * hosts on --mbit Mbit/s links, one peer process per host (bench/support/diloco-peer.ts in its
 * churn mode: it trains until stopped or killed and says every 500 ms how much it has computed and
 * how many of its samples went into collaborative steps). The variants are those of
 * bench/diloco-utilization.ts:
 *   diloco-overlap  DiLoCo rounds of H × T samples, blockwise8, the outer all-reduce overlapped with
 *                   the next round's inner steps (`delayedParameterUpdates`);
 *   dedloc          the target batch T, compression "adaptive".
 * After --warmup-s, a calm stretch of --churn-every-s without churn, then --churns intervals of the
 * same length: at the start of each, the peer that has run longest is killed (SIGKILL: no goodbye,
 * its round in flight and the samples it had not yet averaged are lost) and a new process with a
 * new identity starts on its host at once, bootstrapped from the live peers; it loads the run's state
 * from them as any newcomer does. The joiner's start-up (the process, the backend, the state load)
 * is time its place does not compute.
 *
 * Per stretch: "utilization", Σ over the processes of the seconds inside `model.computeGradients` in
 * the stretch ÷ (peers × the stretch's wall seconds), where a killed process counts up to its last
 * report (at most 500 ms before it died); the rounds the swarm completed; samples computed per
 * second; under churn, "lost", the share of the samples computed by the peers killed in it that
 * never went into a collaborative step (their rounds in flight and their inner steps since); and
 * "goodput", churn's samples per second less the lost ones ÷ calm's, what Decoupled DiLoCo's 88 %
 * goodput under failures is measured against. On a machine whose cores the peers share, a place that is starting up leaves its
 * share of the CPU to the others, so the utilization under churn can even rise: goodput is the
 * measure of what churn costs there.
 */
import { availableParallelism } from "node:os";
import { parseArgs } from "node:util";
import { netlabAvailable, payloadBytesPerSecond, type Host } from "../packages/netlab/src/index.ts";
import { TestAuthority } from "../packages/swarm/test/support/swarm-fixtures.ts";
import { firstLine, log, withLab } from "./support/allreduce-peer.ts";
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
  failedSchema,
  meshedSchema,
  readySchema,
  tickSchema,
  type DilocoPeerTick,
} from "./support/diloco-peer.ts";
import {
  BENCH_MODELS,
  busyCores,
  DEFAULT_DATA_DIR,
  isBenchModel,
  machineJiffies,
  prepareBenchDataset,
} from "./support/diloco-setup.ts";
import { formatCount, formatTable } from "./support/peer-table.ts";

const VARIANTS = ["diloco-overlap", "dedloc"] as const;
type Variant = (typeof VARIANTS)[number];
/** Decoupled DiLoCo's goodput under failures. */
const ANCHOR_GOODPUT = 0.88;

const { values: flags } = parseArgs({
  options: {
    variants: { type: "string", default: VARIANTS.join(",") },
    peers: { type: "string", default: "4" },
    mbit: { type: "string", default: "10" },
    "churn-every-s": { type: "string", default: "60" },
    churns: { type: "string", default: "4" },
    "warmup-s": { type: "string", default: "20" },
    model: { type: "string", default: "mnist-mlp" },
    h: { type: "string", default: "100" },
    "local-batch-size": { type: "string" },
    backend: { type: "string", default: "wasm" },
    "data-dir": { type: "string", default: DEFAULT_DATA_DIR },
  },
});

const variants = parseVariants(flags.variants, VARIANTS);
const peerCount = positive("peers", flags.peers, 2);
const mbit = positive("mbit", flags.mbit, 0.1);
const intervalMs = positive("churn-every-s", flags["churn-every-s"], 5) * 1000;
const churns = positive("churns", flags.churns);
const warmupMs = positive("warmup-s", flags["warmup-s"], 0) * 1000;
const h = positive("h", flags.h);
if (!isBenchModel(flags.model)) {
  throw new RangeError(`--model: unknown model ${flags.model} (${Object.keys(BENCH_MODELS).join(", ")})`);
}
const model = flags.model;
const bench = {
  ...BENCH_MODELS[model],
  localBatchSize: positive(
    "local-batch-size",
    flags["local-batch-size"] ?? String(BENCH_MODELS[model].localBatchSize),
  ),
};

/** One peer process: its place (host) and the ticks it printed. */
interface Process {
  readonly slot: number;
  readonly peer: RunningPeer;
  readonly startedAt: number;
  killedAt?: number;
}

/** What the processes did between two moments (Unix ms). */
interface Stretch {
  readonly utilization: number;
  readonly rounds: number;
  /** Samples computed per second. */
  readonly samplesPerSecond: number;
  /** Of those, the share computed by peers killed in the stretch and never put into a step. */
  readonly lostShare: number;
  /** Samples computed and not lost, per second. */
  readonly goodPerSecond: number;
}

interface Row {
  variant: Variant;
  calm?: Stretch;
  churn?: Stretch;
  /** Cores the whole machine kept busy while the peers trained. */
  machineCores: number;
  stopped?: string;
}

function ticksOf(process: Process): DilocoPeerTick[] {
  return process.peer.watch.lines.flatMap((line) => {
    const parsed = tickSchema.safeParse(line);
    return parsed.success ? [parsed.data] : [];
  });
}

/** The process's last tick at or before `at`; zeros before its first. */
function tickAt(ticks: readonly DilocoPeerTick[], at: number): DilocoPeerTick {
  let last: DilocoPeerTick = { type: "tick", at, computeSeconds: 0, samples: 0, epoch: 0, stepSamples: 0 };
  for (const tick of ticks) {
    if (tick.at > at) break;
    last = tick;
  }
  return last;
}

function stretch(processes: readonly Process[], from: number, to: number): Stretch {
  let compute = 0;
  let samples = 0;
  let lost = 0;
  let firstEpoch = Infinity;
  let lastEpoch = 0;
  for (const process of processes) {
    const ticks = ticksOf(process);
    const start = tickAt(ticks, from);
    const end = tickAt(ticks, to);
    compute += end.computeSeconds - start.computeSeconds;
    samples += end.samples - start.samples;
    // A peer killed in the stretch: what it computed and never put into a step is gone.
    const killed = process.killedAt !== undefined && process.killedAt > from && process.killedAt <= to;
    if (killed) lost += end.samples - end.stepSamples;
    if (process.startedAt <= from && (process.killedAt ?? Infinity) > from) {
      firstEpoch = Math.min(firstEpoch, start.epoch);
    }
    lastEpoch = Math.max(lastEpoch, end.epoch);
  }
  const seconds = (to - from) / 1000;
  return {
    utilization: compute / (peerCount * seconds),
    rounds: Number.isFinite(firstEpoch) ? lastEpoch - firstEpoch : NaN,
    samplesPerSecond: samples / seconds,
    lostShare: samples > 0 ? lost / samples : NaN,
    goodPerSecond: (samples - lost) / seconds,
  };
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));

async function run(variant: Variant, row: Row): Promise<void> {
  await withLab("dlchurn", async (lab) => {
    const hosts = await Promise.all(
      Array.from({ length: peerCount }, (_, i) =>
        lab.addHost({ name: `p${i}`, uploadMbit: mbit, downloadMbit: mbit }),
      ),
    );
    const options: PeerOptions = {
      authority: new TestAuthority(`bench-churn-${variant}`),
      config: labConfig(variant, bench, h),
      bytesPerSecond: payloadBytesPerSecond(mbit),
      peers: peerCount,
      dataDir: flags["data-dir"],
      backend: flags.backend,
      warmupRounds: 0,
      rounds: 1,
      churn: true,
    };
    const processes: Process[] = [];
    const addresses = new Map<Process, string[]>();
    let nextIndex = 0;
    const start = (host: Host, slot: number, bootstrap: string[]): Process => {
      const process: Process = {
        slot,
        peer: spawnPeer(host, nextIndex++, bootstrap, options),
        startedAt: Date.now(),
      };
      processes.push(process);
      return process;
    };
    const live = () => processes.filter((process) => process.killedAt === undefined);
    const failure = (process: Process): string | undefined => {
      const failed = process.peer.watch.lines.find((line) => failedSchema.safeParse(line).success);
      return failed === undefined ? undefined : failedSchema.parse(failed).message;
    };
    try {
      const [firstHost, ...otherHosts] = hosts;
      if (firstHost === undefined) throw new Error("no hosts");
      const first = start(firstHost, 0, []);
      const bootstrap = (await waitLine(first.peer, readySchema, 60_000)).multiaddrs;
      addresses.set(first, bootstrap);
      otherHosts.forEach((host, k) => start(host, k + 1, bootstrap));
      await Promise.all(
        processes.map(async (process) => {
          addresses.set(process, (await waitLine(process.peer, readySchema, 60_000)).multiaddrs);
          await waitLine(process.peer, meshedSchema, 120_000);
        }),
      );
      const startAt = Date.now() + 1_000;
      for (const process of processes) send(process.peer, { cmd: "train", startAt });
      const before = machineJiffies();
      await sleep(startAt + warmupMs - Date.now());
      const calmFrom = Date.now();
      log(`  ${variant}: ${peerCount} peers training; calm for ${intervalMs / 1000} s`);
      await sleep(intervalMs);
      const churnFrom = Date.now();
      for (let churn = 0; churn < churns; churn++) {
        const oldest = live().sort((a, b) => a.startedAt - b.startedAt)[0];
        if (oldest === undefined) throw new Error("no live peer to kill");
        for (const process of live()) {
          const message = failure(process);
          if (message !== undefined) throw new Error(`peer on slot ${process.slot} failed: ${message}`);
        }
        oldest.peer.child.kill("SIGKILL");
        oldest.killedAt = Date.now();
        const host = hosts[oldest.slot];
        if (host === undefined) throw new Error(`no host for slot ${oldest.slot}`);
        await oldest.peer.watch.exited;
        const contacts = live().flatMap((process) => addresses.get(process) ?? []);
        const joiner = start(host, oldest.slot, contacts);
        void waitLine(joiner.peer, readySchema, 60_000).then(
          (ready) => {
            addresses.set(joiner, ready.multiaddrs);
            send(joiner.peer, { cmd: "train", startAt: Date.now() });
          },
          () => undefined,
        );
        log(
          `    churn ${churn + 1}/${churns}: killed the peer on slot ${oldest.slot}, a new one starts there`,
        );
        await sleep(churnFrom + (churn + 1) * intervalMs - Date.now());
      }
      const churnTo = Date.now();
      row.machineCores = busyCores(before, machineJiffies());
      row.calm = stretch(processes, calmFrom, churnFrom);
      row.churn = stretch(processes, churnFrom, churnTo);
    } finally {
      await stopAll(live().map((process) => process.peer));
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
  `DiLoCo under churn: ${peerCount} peers on ${mbit} Mbit/s links, ${model}, T = ${bench.targetBatchSize}, ` +
    `H = ${h}, local batch ${bench.localBatchSize}, one peer replaced every ${intervalMs / 1000} s ` +
    `(${churns} times), backend ${flags.backend}, ${availableParallelism()} cores`,
);
log(`preparing ${model}'s dataset in ${flags["data-dir"]}`);
await prepareBenchDataset(flags["data-dir"], model);
const rows: Row[] = [];
for (const variant of variants) {
  const row: Row = { variant, machineCores: NaN };
  try {
    await run(variant, row);
  } catch (error) {
    row.stopped = firstLine(error);
    log(`  ${variant}: stopped: ${row.stopped}`);
  }
  rows.push(row);
}

const percent = (value: number | undefined): string =>
  value === undefined || !Number.isFinite(value) ? "-" : `${(value * 100).toFixed(1)}%`;
const table = rows.map(({ variant, calm, churn, machineCores }) => {
  const goodput = calm !== undefined && churn !== undefined ? churn.goodPerSecond / calm.goodPerSecond : NaN;
  return [
    variant,
    percent(calm?.utilization),
    percent(churn?.utilization),
    calm === undefined ? "-" : String(calm.rounds),
    churn === undefined ? "-" : String(churn.rounds),
    calm === undefined ? "-" : formatCount(calm.samplesPerSecond),
    churn === undefined ? "-" : formatCount(churn.samplesPerSecond),
    percent(churn?.lostShare),
    percent(goodput),
    Number.isFinite(goodput) ? (goodput >= ANCHOR_GOODPUT ? "yes" : "no") : "-",
    machineCores.toFixed(2),
  ];
});
console.log();
const header = [
  "variant",
  "calm util.",
  "churn util.",
  "calm rounds",
  "churn rounds",
  "calm samples/s",
  "churn samples/s",
  "churn lost",
  "goodput",
  `≥ ${ANCHOR_GOODPUT * 100} %`,
  "machine",
];
for (const line of formatTable(header, table)) console.log(line);
for (const row of rows) if (row.stopped !== undefined) console.log(`${row.variant}: stopped: ${row.stopped}`);
console.log(
  `util.: s in computeGradients ÷ (${peerCount} places × wall s) over the stretch; calm: ${intervalMs / 1000} s ` +
    `without churn, churn: ${churns} × ${intervalMs / 1000} s, each starting with the oldest peer killed and a new ` +
    `one started in its place. rounds: the swarm's steps in the stretch. samples/s: computed, all peers. lost: the ` +
    `share of churn's samples computed by the killed peers and never put into a step. goodput: churn's samples/s ` +
    `less the lost ones ÷ calm's. machine: cores the whole machine kept busy while they trained. ` +
    `Anchor: Decoupled DiLoCo's ${ANCHOR_GOODPUT * 100} % goodput under failures. ` +
    `Wall time ${((performance.now() - started) / 1000).toFixed(0)} s.`,
);
