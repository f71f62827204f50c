/**
 * Load-balanced vs uniform butterfly all-reduce on heterogeneous tc-shaped links: DeDLOC Table 1
 * set-ups C and D, scaled down in bandwidth and vector size, with the paper's peer counts.
 *
 *   node bench/allreduce-load-balancing.ts [--setups C,D] [--slow-mbit 2] [--elements 262144]
 *                                          [--rounds 3] [--chunk-kib 8] [--in-flight 2] [--max-in-flight 256]
 *                                          [--keep-slow-connections]
 *                                          [--trace] [--cc reno] [--configured-bandwidth]
 *
 * Needs root (netlab). C: 8 fast + 16 slow peers, fast = 5 × slow (paper: 1 Gb/s and 200 Mb/s);
 * D: 16 slow + 1 peer 12.5 × faster (paper: 2.5 Gb/s). With --slow-mbit 2 that is 2, 10 and
 * 25 Mbit/s, up and down. The default rate is the fastest at which 24 peer processes on a 2-core
 * machine are still network-bound (halving it doubles the balanced time: 8.5 → 17 s at 2 → 1
 * Mbit/s, but only 7.5 → 8.9 s at 4 → 2, where the CPU limits and C's speed-up fell to 1.2–1.35×). One peer process per host (bench/support/allreduce-peer.ts).
 * Each peer measures its own link as a volunteer's does: a speed test (`Swarm.measureLink`) against a
 * server on a 1 Gbit/s host of the lab, standing in for the run's aux, which stops before the first
 * round; the all-reduce's traffic refines the estimate after each round. The measured rates per
 * class of link are printed against the links' payload capacity (1448/1514 × rate). With
 * --configured-bandwidth each peer is told its payload capacity instead (the `bandwidth` option), to
 * compare. Compression "none". After two warm-up rounds, rounds alternate
 * uniform parts (loadBalancing false) and LP parts (true) on the same processes and links
 * (--rounds of each); the peers flip `config.averaging.loadBalancing` between rounds.
 *
 * Measured: the all-reduce alone — last peer's `allreduce.run` end minus the first peer's start
 * (matchmaking and the LP happen before `run`). Printed next to it: the time the model predicts
 * (`predictedAllReduceSeconds` with `uniformPartFractions` / `optimalPartFractions`, each peer
 * limited by its slower link, no latency) and the speed-ups measured, modelled and in the paper
 * (Table 1: C 5.69 s → 2.96 s = 1.92×, D 5.3 s → 3.18 s = 1.67×). Fewer peers could not show
 * these: the uniform butterfly's slowest peer moves 2(n−1)/n of the vector, so the bound on the
 * speed-up shrinks with n. "fast part" is the share of the vector the fast peers reduced.
 * --chunk-kib, --in-flight and --max-in-flight default to the experiment config's defaults.
 * Scaling: the vector is ~100× smaller than ResNet-50's (1 MiB vs 102 MB), and the chunk must be
 * small too: with 256 KiB chunks the 128 KiB parts of set-up C are one chunk each, so a reducer can
 * only answer once a sender's whole part has arrived and nothing overlaps (C measured 1.47× instead
 * of 1.91×). On slow links a round's requests queue behind the chunks of the streams already
 * under way, which is why the all-reduce's responders wait 60 s for a request (at 1 Mbit/s the
 * earlier 10 s failed most uniform rounds).
 * --trace, --cc, --keep-slow-connections: see bench/allreduce-bandwidth.ts.
 */
import { parseArgs } from "node:util";
import {
  optimalPartFractions,
  predictedAllReduceSeconds,
  uniformPartFractions,
  type MemberCapacity,
} from "../packages/swarm/src/averaging/load-balancing.ts";
import { payloadBytesPerSecond } from "../packages/netlab/src/index.ts";
import {
  benchConfig,
  DEFAULT_AVERAGING,
  linkTrace,
  PeerGroup,
  useCongestionControl,
  firstLine,
  log,
  median,
  withLab,
  type MeasuredLink,
  type RoundReport,
} from "./support/allreduce-peer.ts";

const { values: flags } = parseArgs({
  options: {
    setups: { type: "string", default: "C,D" },
    "slow-mbit": { type: "string", default: "2" },
    elements: { type: "string", default: String(2 ** 18) },
    rounds: { type: "string", default: "3" },
    "chunk-kib": { type: "string" },
    "in-flight": { type: "string" },
    "max-in-flight": { type: "string" },
    "keep-slow-connections": { type: "boolean", default: false },
    trace: { type: "boolean", default: false },
    cc: { type: "string", default: "" },
    "configured-bandwidth": { type: "boolean", default: false },
  },
});
/** Speed tests run against a host this fast, as volunteers' peers run theirs against the aux. */
const PROBE_HOST_MBIT = 1000;
const slowMbit = Number(flags["slow-mbit"]);
const elements = Number(flags.elements);
const rounds = Number(flags.rounds);
const chunkKib = Number(flags["chunk-kib"] ?? DEFAULT_AVERAGING.chunkSizeBytes / 1024);
const chunksInFlight = Number(flags["in-flight"] ?? DEFAULT_AVERAGING.chunksInFlight);
const maxChunksInFlight = Number(flags["max-in-flight"] ?? DEFAULT_AVERAGING.maxChunksInFlight);
for (const [name, value] of [
  ["slow-mbit", slowMbit],
  ["elements", elements],
  ["rounds", rounds],
  ["chunk-kib", chunkKib],
  ["in-flight", chunksInFlight],
  ["max-in-flight", maxChunksInFlight],
] as const) {
  if (!(Number.isFinite(value) && value > 0))
    throw new Error(`--${name} must be a positive number, got ${value}`);
}

interface Setup {
  name: string;
  /** Link rate of each peer, Mbit/s (up = down). */
  rates: number[];
  paper: { uniform: number; balanced: number };
}

const SETUPS: Record<string, Setup> = {
  C: {
    name: "C: 8 fast (5×) + 16 slow",
    rates: [...Array<number>(8).fill(5 * slowMbit), ...Array<number>(16).fill(slowMbit)],
    paper: { uniform: 5.69, balanced: 2.96 },
  },
  D: {
    name: "D: 16 slow + 1 fast (12.5×)",
    rates: [...Array<number>(16).fill(slowMbit), 12.5 * slowMbit],
    paper: { uniform: 5.3, balanced: 3.18 },
  },
};

interface Outcome {
  setup: Setup;
  uniform: RoundReport[];
  balanced: RoundReport[];
  model: { uniform: number; balanced: number };
  /** Rounds that failed (what and why), and why the set-up stopped early, if it did. */
  failures: string[];
  stopped?: string;
}

async function modelSeconds(rates: readonly number[]): Promise<{ uniform: number; balanced: number }> {
  const members: MemberCapacity[] = rates.map((mbit, i) => ({
    peerId: `p${String(i).padStart(2, "0")}`,
    uploadBytesPerSecond: payloadBytesPerSecond(mbit),
    downloadBytesPerSecond: payloadBytesPerSecond(mbit),
    canReduce: true,
    sends: true,
  }));
  const bytes = elements * 4;
  return {
    uniform: predictedAllReduceSeconds(members, uniformPartFractions(members), bytes),
    balanced: predictedAllReduceSeconds(members, await optimalPartFractions(members), bytes),
  };
}

async function measure(setup: Setup): Promise<Outcome> {
  const model = await modelSeconds(setup.rates);
  const partial: { outcome?: Outcome } = {};
  try {
    return await run(setup, model, partial);
  } catch (error) {
    log(`  ${setup.name}: stopped: ${error instanceof Error ? error.message.slice(-4000) : String(error)}`);
    const outcome = partial.outcome ?? { setup, uniform: [], balanced: [], model, failures: [] };
    return { ...outcome, stopped: firstLine(error) };
  }
}

async function run(setup: Setup, model: Outcome["model"], partial: { outcome?: Outcome }): Promise<Outcome> {
  return withLab("arlb", async (lab) => {
    const n = setup.rates.length;
    log(
      `${setup.name}: ${n} peers; model ${model.uniform.toFixed(2)} s uniform, ${model.balanced.toFixed(2)} s balanced`,
    );
    const hosts = await Promise.all(
      setup.rates.map((mbit, i) =>
        lab.addHost({ name: `${mbit > slowMbit ? "f" : "s"}${i}`, uploadMbit: mbit, downloadMbit: mbit }),
      ),
    );
    log(`  TCP congestion control in the lab: ${await useCongestionControl(hosts, flags.cc)}`);
    const configured = flags["configured-bandwidth"];
    const probeHost = configured
      ? undefined
      : await lab.addHost({ name: "probe", uploadMbit: PROBE_HOST_MBIT, downloadMbit: PROBE_HOST_MBIT });
    const group = await PeerGroup.launch(
      hosts.map((host, i) => {
        const rate = payloadBytesPerSecond(setup.rates[i] ?? slowMbit);
        return {
          host,
          ...(configured ? { bandwidth: { uploadBytesPerSecond: rate, downloadBytesPerSecond: rate } } : {}),
          weight: i + 1,
        };
      }),
      {
        elements,
        config: benchConfig({
          maxGroupSize: 32,
          modelSeconds: model.uniform,
          chunkKib,
          chunksInFlight,
          maxChunksInFlight,
        }),
        log,
        keepSlowConnections: flags["keep-slow-connections"],
        ...(probeHost === undefined ? {} : { probeHost }),
      },
    );
    if (!configured) {
      // What the speed tests found, per class of link, against the links' payload capacity.
      for (const mbit of [...new Set(setup.rates)]) {
        const measured = group.measuredLinks.filter((_, i) => setup.rates[i] === mbit);
        const ratio = (pick: (link: MeasuredLink) => number) =>
          median(
            measured.flatMap((link) =>
              link === undefined ? [] : [pick(link) / payloadBytesPerSecond(mbit)],
            ),
          );
        log(
          `  measured ${mbit} Mbit/s links (${measured.length}): up ×${ratio((l) => l.uploadBytesPerSecond).toFixed(2)}, ` +
            `down ×${ratio((l) => l.downloadBytesPerSecond).toFixed(2)} of their payload capacity (median)`,
        );
      }
    }
    const outcome: Outcome = { setup, uniform: [], balanced: [], model, failures: [] };
    partial.outcome = outcome;
    try {
      // Two warm-ups: the balanced one also loads the HiGHS Wasm module in every peer (~0.1 s of
      // CPU each, 24 at once on 2 cores), which would otherwise delay the first timed round's start.
      const warmUps = 2;
      const schedule = Array.from({ length: warmUps + 2 * rounds }, (_, k) => k % 2 === 1);
      let consecutiveFailures = 0;
      for (const [r, loadBalancing] of schedule.entries()) {
        const what = `${r < warmUps ? "warm-up " : ""}${loadBalancing ? "balanced" : "uniform"}`;
        let report: RoundReport;
        try {
          report = await group.round(loadBalancing);
          consecutiveFailures = 0;
        } catch (error) {
          outcome.failures.push(`${what}: ${firstLine(error)}`);
          log(`  ${what}: FAILED: ${firstLine(error)}`);
          if (++consecutiveFailures >= 2) throw error;
          continue;
        }
        const modelled = loadBalancing ? model.balanced : model.uniform;
        log(
          `  ${what}: ${report.seconds.toFixed(2)} s (model ${modelled.toFixed(2)} s, ×${(report.seconds / modelled).toFixed(3)}), ` +
            `fast part ${(fastShare(report, setup) * 100).toFixed(1)}%, start spread ${(report.startSpreadSeconds * 1000).toFixed(0)} ms, ` +
            `CPU ${report.peerCpuCores.toFixed(2)} cores, machine ${(report.machineBusy * 100).toFixed(0)}% busy, ` +
            `windows ${median(report.peers.map((p) => p.largestWindow))}–${Math.max(...report.peers.map((p) => p.largestWindow))} chunks`,
        );
        if (flags.trace)
          for (const text of linkTrace(report, (i) => setup.rates[i] ?? slowMbit)) log(`    ${text}`);
        if (r >= warmUps) (loadBalancing ? outcome.balanced : outcome.uniform).push(report);
      }
    } finally {
      await group.stop();
    }
    return outcome;
  });
}

/** The share of the vector reduced by the peers faster than the slow rate. */
function fastShare(report: RoundReport, setup: Setup): number {
  const fast = report.peers.reduce(
    (sum, p, i) => sum + ((setup.rates[i] ?? 0) > slowMbit ? p.partElements : 0),
    0,
  );
  return fast / elements;
}

const chosen = flags.setups.split(",").map((key) => {
  const setup = SETUPS[key.trim().toUpperCase()];
  if (setup === undefined)
    throw new Error(`unknown set-up ${key}; choose from ${Object.keys(SETUPS).join(", ")}`);
  return setup;
});
log(
  `load-balancing bench: P=${elements} float32 (${((elements * 4) / 2 ** 20).toFixed(1)} MiB), slow links ${slowMbit} Mbit/s, ` +
    `chunks of ${chunkKib} KiB encoded (${chunksInFlight}–${maxChunksInFlight} in flight), 2 warm-up + ${rounds} uniform + ${rounds} balanced rounds per set-up`,
);
const outcomes: Outcome[] = [];
for (const setup of chosen) outcomes.push(await measure(setup));

const header = [
  "set-up",
  "uniform s",
  "balanced s",
  "speed-up",
  "model uni s",
  "model bal s",
  "model speed-up",
  "paper speed-up",
  "meas/model uni",
  "meas/model bal",
  "fast part",
  "CPU",
  "failed",
];
const rows = outcomes.map(({ setup, uniform, balanced, model, failures, stopped }) => {
  const u = median(uniform.map((r) => r.seconds));
  const b = median(balanced.map((r) => r.seconds));
  const lastBalanced = balanced[balanced.length - 1];
  return [
    setup.name,
    u.toFixed(2),
    b.toFixed(2),
    `${(u / b).toFixed(2)}x`,
    model.uniform.toFixed(2),
    model.balanced.toFixed(2),
    `${(model.uniform / model.balanced).toFixed(2)}x`,
    `${(setup.paper.uniform / setup.paper.balanced).toFixed(2)}x`,
    (u / model.uniform).toFixed(2),
    (b / model.balanced).toFixed(2),
    lastBalanced === undefined ? "-" : `${(fastShare(lastBalanced, setup) * 100).toFixed(0)}%`,
    median([...uniform, ...balanced].map((r) => r.peerCpuCores)).toFixed(2),
    `${failures.length}${stopped === undefined ? "" : " (stopped)"}`,
  ];
});
const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
const line = (cells: readonly string[]): string => cells.map((c, i) => c.padStart(widths[i] ?? 0)).join("  ");
console.log();
console.log(line(header));
for (const row of rows) console.log(line(row));
for (const { setup, failures, stopped } of outcomes) {
  for (const failure of failures) console.log(`${setup.name}: failed round: ${failure}`);
  if (stopped !== undefined) console.log(`${setup.name}: stopped early: ${stopped}`);
}
console.log(
  `Medians of ${rounds} rounds each. Model: predictedAllReduceSeconds at 1448/1514 × the link rate (payload); ` +
    `paper: DeDLOC Table 1 AR ÷ Ours. fast part: share of the vector the fast peers reduced with the LP.`,
);
