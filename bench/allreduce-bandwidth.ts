/**
 * Butterfly all-reduce time on equal tc-shaped links against the bandwidth lower bound.
 *
 *   node bench/allreduce-bandwidth.ts [--peers 4,8] [--mbit 10] [--elements 2097152] [--rounds 3]
 *       [--chunk-kib 8] [--in-flight 2] [--max-in-flight 256] [--compression none] [--load-balancing] [--trace] [--cc reno]
 *       [--queue-ms 50] [--keep-slow-connections] [--rtt-ms 0]
 *
 * Needs root (netlab). For every n in --peers and B in --mbit: one lab with n hosts, each link
 * shaped to B Mbit/s up and down (tbf), one peer process per host (bench/support/allreduce-peer.ts),
 * compression "none" (or --compression), parts uniform (or from the LP with --load-balancing; equal
 * links give equal parts). --chunk-kib (encoded bytes per chunk), --in-flight (each stream's first
 * and least window, in chunks) and --max-in-flight (the most its window may grow to, following what
 * the stream sends in a round trip plus 200 ms; equal to --in-flight for a fixed window) default to the
 * experiment config's defaults; each round prints the largest window a stream used. One warm-up round, then --rounds timed rounds.
 *
 * What is measured: each peer times its own `allreduce.run` (the averager calls it after
 * matchmaking and the LP), and a round's time is the last peer's end minus the first peer's start
 * (all peers share the machine's clock). Every round checks that all peers got the same bytes and
 * the right weighted mean (within the codec's error). The lower bound is the bytes each peer must
 * move on its slower link: 2·P·b·(n−1)/(n·B) seconds for P values of b bits on the wire (32 without
 * compression; the codec's size on the whole vector otherwise). Two ratios are printed (target
 * ≤ 1.15):
 *   "/B"      measured ÷ bound at the nominal (configured) rate B;
 *   "/0.956B" measured ÷ bound at one TCP flow's best goodput on a tbf link, 1448/1514 × B
 *             (Ethernet + IP + TCP headers), i.e. what the link can carry as payload.
 * "CPU" is the peers' CPU seconds during the round per wall second (2 = both cores of a 2-core
 * machine), "busy" the whole machine's busy share from /proc/stat (other processes included). To
 * check that the network and not the CPU is the bottleneck, run two rates (--mbit 20,10): halving
 * B should double the time. The default 10 Mbit/s passes that check with 8 peers on 2 cores (20 →
 * 10 Mbit/s took 7.2 → 13.2 s, with the machine 93 % busy at 20). With 8-bit codecs eight peers on
 * two cores are CPU-bound (every peer encodes and decodes 4× the elements per wire byte).
 *
 * --rtt-ms gives the links latency: each delays a quarter of it each way, so two peers see that
 * round trip (netem, or netlab's delay line on kernels without it).
 * Diagnostics: --trace prints, per round, each host's TCP retransmissions, RTOs and upload tbf drops
 * and each peer's link use (interface byte counters in 100 ms slots as a share of B: "█" ≥ 90 %,
 * "▆" ≥ 60 %, "▃" ≥ 30 %, "▁" > 3 %, "·" idle). --cc sets the lab's TCP congestion control (the
 * namespaces inherit the machine's, bbr here; only "allowed" algorithms can be set, e.g. reno).
 * --queue-ms sets the tbf queue (netlab default 50 ms, at least 256 KiB). --keep-slow-connections
 * is an experiment: it stops libp2p's connection monitor from aborting connections whose ping (every
 * 10 s, ≥ 5 s timeout) waits behind queued all-reduce data, which otherwise fails rounds once a
 * connection holds more than a few seconds of data (e.g. P = 4 Mi elements at 20 Mbit/s, n = 4).
 */
import { parseArgs } from "node:util";
import { CompressionMethod } from "@barnraise/protocol";
import { payloadBytesPerSecond, TCP_GOODPUT_PER_RATE } from "../packages/netlab/src/index.ts";
import { compressorFor, type CompressionMethodName } from "../packages/swarm/src/compression/index.ts";
import {
  benchConfig,
  DEFAULT_AVERAGING,
  firstLine,
  log,
  median,
  linkTrace,
  PeerGroup,
  useCongestionControl,
  withLab,
  type NetCounters,
  type RoundReport,
} from "./support/allreduce-peer.ts";

const { values: flags } = parseArgs({
  options: {
    peers: { type: "string", default: "4,8" },
    mbit: { type: "string", default: "10" },
    elements: { type: "string", default: String(2 ** 21) },
    rounds: { type: "string", default: "3" },
    "chunk-kib": { type: "string" },
    "in-flight": { type: "string" },
    "max-in-flight": { type: "string" },
    "load-balancing": { type: "boolean", default: false },
    trace: { type: "boolean", default: false },
    cc: { type: "string", default: "" },
    "keep-slow-connections": { type: "boolean", default: false },
    "queue-ms": { type: "string" },
    "rtt-ms": { type: "string", default: "0" },
    compression: { type: "string", default: "none" },
  },
});
const list = (text: string): number[] => text.split(",").map(Number);
const peerCounts = list(flags.peers);
const rates = list(flags.mbit);
const elements = Number(flags.elements);
const rounds = Number(flags.rounds);
const chunkKib = Number(flags["chunk-kib"] ?? DEFAULT_AVERAGING.chunkSizeBytes / 1024);
const chunksInFlight = Number(flags["in-flight"] ?? DEFAULT_AVERAGING.chunksInFlight);
const maxChunksInFlight = Number(flags["max-in-flight"] ?? DEFAULT_AVERAGING.maxChunksInFlight);
const loadBalancing = flags["load-balancing"];
const queue = flags["queue-ms"] === undefined ? {} : { queueMs: Number(flags["queue-ms"]) };
/** Round trip between two peers: each link delays a quarter of it each way (netem or netlab's delay line). */
const rttMs = Number(flags["rtt-ms"]);
if (!(Number.isFinite(rttMs) && rttMs >= 0)) throw new Error(`--rtt-ms must be 0 or more, got ${rttMs}`);
const delay = rttMs > 0 ? { delayMs: rttMs / 4 } : {};
const methods: readonly string[] = Object.values(CompressionMethod);
if (!methods.includes(flags.compression)) {
  throw new Error(`--compression must be one of ${methods.join(", ")}, got ${flags.compression}`);
}
const compression = flags.compression as CompressionMethodName;
/** Wire bits per element of the chosen codec on the whole vector (32 without compression). */
const bitsPerElement = 32 * compressorFor(compression, elements).estimateRatio(elements);
for (const [name, value] of [
  ["elements", elements],
  ["rounds", rounds],
  ["chunk-kib", chunkKib],
  ["in-flight", chunksInFlight],
  ["max-in-flight", maxChunksInFlight],
  ...peerCounts.map((n) => ["peers", n] as const),
  ...rates.map((r) => ["mbit", r] as const),
] as const) {
  if (!(Number.isFinite(value) && value > 0))
    throw new Error(`--${name} must be a positive number, got ${value}`);
}

interface Row {
  n: number;
  mbit: number;
  timed: RoundReport[];
  /** Rounds that failed (what and why), and why the configuration stopped early, if it did. */
  failures: string[];
  stopped?: string;
}

async function measure(n: number, mbit: number): Promise<Row> {
  const row: Row = { n, mbit, timed: [], failures: [] };
  try {
    await run(row);
  } catch (error) {
    row.stopped = firstLine(error);
    log(`  n=${n}, B=${mbit} Mbit/s: stopped: ${row.stopped}`);
  }
  return row;
}

async function run(row: Row): Promise<void> {
  const { n, mbit } = row;
  await withLab("arbw", async (lab) => {
    log(`n=${n}, B=${mbit} Mbit/s: building the lab`);
    const hosts = await Promise.all(
      Array.from({ length: n }, (_, i) =>
        lab.addHost({ name: `p${i}`, uploadMbit: mbit, downloadMbit: mbit, ...queue, ...delay }),
      ),
    );
    log(`  TCP congestion control in the lab: ${await useCongestionControl(hosts, flags.cc)}`);
    const bytesPerSecond = payloadBytesPerSecond(mbit);
    const group = await PeerGroup.launch(
      hosts.map((host, i) => ({
        host,
        bandwidth: { uploadBytesPerSecond: bytesPerSecond, downloadBytesPerSecond: bytesPerSecond },
        weight: i + 1,
      })),
      {
        elements,
        config: benchConfig({
          maxGroupSize: Math.max(2, n),
          modelSeconds: lowerBound(n, mbit),
          chunkKib,
          chunksInFlight,
          maxChunksInFlight,
          loadBalancing,
          compression,
        }),
        log,
        keepSlowConnections: flags["keep-slow-connections"],
      },
    );
    try {
      const bound = lowerBound(n, mbit);
      let consecutiveFailures = 0;
      for (let r = 0; r <= rounds; r++) {
        const what = r === 0 ? "warm-up" : `round ${r}/${rounds}`;
        const countersBefore = flags.trace ? await group.netCounters() : [];
        let report: RoundReport;
        try {
          report = await group.round(loadBalancing);
          consecutiveFailures = 0;
        } catch (error) {
          row.failures.push(`${what}: ${firstLine(error)}`);
          log(`  ${what}: FAILED: ${firstLine(error)}`);
          if (++consecutiveFailures >= 2) throw error;
          continue;
        }
        if (flags.trace) {
          const after = await group.netCounters();
          const delta = (pick: (c: NetCounters) => number) =>
            after.map((c, i) => pick(c) - pick(countersBefore[i] ?? c)).join(",");
          log(
            `    per peer: retransmitted segments ${delta((c) => c.retransSegs)}; RTOs ${delta((c) => c.timeouts)}; ` +
              `loss probes ${delta((c) => c.lossProbes)}; upload tbf drops ${delta((c) => c.uploadDrops)}`,
          );
        }
        log(
          `  ${what}: ${report.seconds.toFixed(2)} s (bound ${bound.toFixed(2)} s, ×${(report.seconds / bound).toFixed(3)}), ` +
            `start spread ${(report.startSpreadSeconds * 1000).toFixed(0)} ms, average() ${report.averageSeconds.toFixed(2)} s, ` +
            `CPU ${report.peerCpuCores.toFixed(2)} cores, machine ${(report.machineBusy * 100).toFixed(0)}% busy, ` +
            `largest window ${Math.max(...report.peers.map((peer) => peer.largestWindow))} chunks`,
        );
        if (flags.trace) for (const text of linkTrace(report, () => mbit)) log(`    ${text}`);
        if (r > 0) row.timed.push(report);
      }
    } finally {
      await group.stop();
    }
  });
}

/** Seconds to move 2·P·(n−1)/n values of b bits (32 without compression) through a B Mbit/s link. */
function lowerBound(n: number, mbit: number): number {
  return (2 * elements * bitsPerElement * (n - 1)) / (n * mbit * 1e6);
}

const results: Row[] = [];
log(
  `all-reduce bandwidth bench: P=${elements} float32 (${((elements * 4) / 2 ** 20).toFixed(1)} MiB), ` +
    `${rttMs > 0 ? `${rttMs} ms round trip between peers, ` : ""}compression ${compression}, chunks of ${chunkKib} KiB encoded (${chunksInFlight}–${maxChunksInFlight} in flight), load balancing ${loadBalancing ? "on" : "off"}, 1 warm-up + ${rounds} timed rounds`,
);
for (const n of peerCounts) for (const mbit of rates) results.push(await measure(n, mbit));

const header = [
  "n",
  "P",
  "B Mbit/s",
  "median s",
  "min–max s",
  "bound s",
  "/B",
  "/0.956B",
  "spread ms",
  "CPU",
  "busy",
  "failed",
];
const rows = results.map(({ n, mbit, timed, failures, stopped }) => {
  const seconds = timed.map((r) => r.seconds);
  const measured = median(seconds);
  const bound = lowerBound(n, mbit);
  return [
    String(n),
    String(elements),
    String(mbit),
    measured.toFixed(2),
    seconds.length === 0 ? "-" : `${Math.min(...seconds).toFixed(2)}–${Math.max(...seconds).toFixed(2)}`,
    bound.toFixed(2),
    (measured / bound).toFixed(3),
    (measured / (bound / TCP_GOODPUT_PER_RATE)).toFixed(3),
    median(timed.map((r) => r.startSpreadSeconds * 1000)).toFixed(0),
    median(timed.map((r) => r.peerCpuCores)).toFixed(2),
    `${(median(timed.map((r) => r.machineBusy)) * 100).toFixed(0)}%`,
    `${failures.length}${stopped === undefined ? "" : " (stopped)"}`,
  ];
});
const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
const line = (cells: readonly string[]): string => cells.map((c, i) => c.padStart(widths[i] ?? 0)).join("  ");
console.log();
console.log(line(header));
for (const row of rows) console.log(line(row));
for (const { n, mbit, failures, stopped } of results) {
  for (const failure of failures) console.log(`n=${n}, B=${mbit}: failed ${failure}`);
  if (stopped !== undefined) console.log(`n=${n}, B=${mbit}: stopped early: ${stopped}`);
}
console.log(
  `/B: median ÷ 2·P·b·(n−1)/(n·B) at the configured rate (b = ${bitsPerElement.toFixed(2)} bits); /0.956B: ÷ the same bound at one TCP flow's ` +
    `payload rate (1448/1514·B). Target ≤ 1.15. CPU: peers' CPU s per wall s (2 cores); busy: whole machine.`,
);
