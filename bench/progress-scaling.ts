/**
 * Progress traffic per peer as the swarm grows: n in-process swarms (real libp2p on loopback, the
 * engine's gossipsub progress transport) for n = 8, 16, 32 and 64, each reporting progress, and
 * the gossip messages and bytes each peer handles per second, in and out.
 *
 *   node bench/progress-scaling.ts [--sizes 8,16,32,64] [--window-s 20] [--join-timeout-s 120] [--threads N]
 *
 * For each n: one swarm starts, the others bootstrap from it and mesh; once every peer holds a
 * live record of every other (or --join-timeout-s passed, reported), the counters are read, each
 * peer reports progress every 500 ms (a new epoch every 6 s, which publishes promptly) for
 * --window-s, and the counters are read again. Counts come from gossipsub's own metrics (its
 * MetricsRegister hook, see SwarmNodeOptions.pubsubMetrics): "msgs" the published messages carried
 * in RPC frames (duplicates and forwards included), "frames" the RPC frames, "bytes" their encoded
 * size (control messages included: subscriptions, GRAFT/PRUNE, IHAVE/IWANT, IDONTWANT). Each is a
 * mean per peer per second. "period" is a peer's publish period at the end (see ProgressTracker).
 * "direct push" is what the previous transport cost (one rpc per connected member per second, in
 * and out: n − 1 each way), computed, not measured.
 *
 * The peers run in this process over worker threads (--threads, default one per core, 2 to 8), as
 * in the scale tests: 64 libp2p nodes on one event loop do not even finish meshing on two cores.
 * On a machine with few cores the largest swarms may still lag; no number here is a timing assertion.
 */
import { availableParallelism } from "node:os";
import { parseArgs } from "node:util";
import {
  zeroCounts,
  type GossipCounter,
  type GossipCounts,
} from "../packages/swarm/test/support/gossip-counters.ts";
import { TestAuthority } from "../packages/swarm/test/support/swarm-fixtures.ts";
import { testConfig } from "../packages/swarm/test/support/swarm-harness.ts";
import { ThreadedSwarms } from "../packages/swarm/test/support/swarm-threads.ts";

const { values } = parseArgs({
  options: {
    sizes: { type: "string", default: "8,16,32,64" },
    "window-s": { type: "string", default: "20" },
    "join-timeout-s": { type: "string", default: "120" },
    threads: { type: "string", default: String(Math.max(2, Math.min(8, availableParallelism()))) },
  },
});
const sizes = values.sizes.split(",").map(Number);
const windowMs = Number(values["window-s"]) * 1000;
const joinTimeoutMs = Number(values["join-timeout-s"]) * 1000;
const threads = Number(values.threads);
if (sizes.some((n) => !Number.isSafeInteger(n) || n < 2) || !(windowMs > 0) || !(joinTimeoutMs > 0)) {
  throw new Error("--sizes takes integers of at least 2; --window-s and --join-timeout-s positive numbers");
}
if (!Number.isSafeInteger(threads) || threads < 1) throw new Error("--threads takes a positive integer");

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface Row {
  n: number;
  joined: boolean;
  joinSeconds: number;
  perPeer: GossipCounts;
  periodMs: number;
}

async function run(n: number): Promise<Row> {
  const swarms = await ThreadedSwarms.start(
    new TestAuthority(`exp-progress-${n}`),
    testConfig,
    n,
    Math.min(threads, n),
  );
  try {
    let epoch = 1;
    let samples = 0;
    const report = async () => {
      samples += 1;
      await swarms.progress(epoch, samples);
    };
    const joinStart = Date.now();
    let joined = false;
    while (Date.now() - joinStart < joinTimeoutMs) {
      await report();
      if ((await swarms.gossip()).every((swarm) => swarm.swarmSize === n)) {
        joined = true;
        break;
      }
      await sleep(500);
    }
    const joinSeconds = (Date.now() - joinStart) / 1000;
    const before = await swarms.gossip();
    const windowStart = Date.now();
    let nextEpochAt = windowStart + 6_000;
    while (Date.now() - windowStart < windowMs) {
      if (Date.now() >= nextEpochAt) {
        epoch += 1;
        samples = 0;
        nextEpochAt += 6_000;
      }
      await report();
      await sleep(500);
    }
    const after = await swarms.gossip();
    const seconds = (Date.now() - windowStart) / 1000;
    const perPeer = zeroCounts();
    after.forEach((swarm, i) => {
      for (const key of Object.keys(perPeer) as GossipCounter[]) {
        perPeer[key] += (swarm.counts[key] - (before[i]?.counts[key] ?? 0)) / seconds / n;
      }
    });
    const periodMs = after.reduce((sum, swarm) => sum + swarm.periodMs, 0) / n;
    return { n, joined, joinSeconds, perPeer, periodMs };
  } finally {
    await swarms.stop();
  }
}

const rows: Row[] = [];
for (const n of sizes) {
  try {
    const row = await run(n);
    rows.push(row);
    console.log(
      `n=${n}: ${row.joined ? "meshed" : "NOT fully meshed"} after ${row.joinSeconds.toFixed(1)} s; ` +
        `${row.perPeer.msgsIn.toFixed(1)} msgs/s in per peer`,
    );
  } catch (error) {
    console.log(`n=${n}: failed (${error instanceof Error ? error.message : String(error)})`);
  }
}

const fmt = (value: number, digits = 1) => value.toFixed(digits).padStart(9);
console.log("");
console.log("Progress gossip per peer per second (means over the peers of each swarm)");
console.log(
  "    n   msgs in  msgs out frames in frames out  bytes in bytes out  period s  direct push msgs in/out (computed)",
);
for (const row of rows) {
  const p = row.perPeer;
  console.log(
    `${String(row.n).padStart(5)}${fmt(p.msgsIn)}${fmt(p.msgsOut)}${fmt(p.framesIn)} ${fmt(p.framesOut)}` +
      `${fmt(p.bytesIn, 0)}${fmt(p.bytesOut, 0)}${fmt(row.periodMs / 1000)}  ${row.n - 1}${row.joined ? "" : "  (not fully meshed)"}`,
  );
}
const small = rows.find((row) => row.n === sizes[0]);
const large = rows.at(-1);
if (small !== undefined && large !== undefined && large !== small) {
  const ratio = (key: GossipCounter) => (large.perPeer[key] / small.perPeer[key]).toFixed(2);
  console.log("");
  console.log(
    `ratio n=${large.n} / n=${small.n}: msgs in ${ratio("msgsIn")}, msgs out ${ratio("msgsOut")}, ` +
      `bytes in ${ratio("bytesIn")}, bytes out ${ratio("bytesOut")} (direct push: ${((large.n - 1) / (small.n - 1)).toFixed(2)})`,
  );
}
process.exit(0);
