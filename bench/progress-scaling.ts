/**
 * Progress traffic per peer as the swarm grows: n in-process swarms (real libp2p on loopback, the
 * engine's gossipsub progress transport) for n = 8, 16, 32 and 64, each reporting progress, and
 * the gossip messages and bytes each peer handles per second, in and out.
 *
 *   node bench/progress-scaling.ts [--sizes 8,16,32,64] [--window-s 20] [--join-timeout-s 120]
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
 * Every peer runs in this one process, so on a machine with few cores the largest swarms may lag;
 * no number here is a timing assertion.
 */
import { generateKeyPair, parseExperimentConfig } from "@barnraise/protocol";
import type { MetricsRegister } from "@libp2p/gossipsub/metrics";
import { parseArgs } from "node:util";
import { Swarm } from "../packages/swarm/src/swarm.ts";
import { silentLogger, TestAuthority } from "../packages/swarm/test/support/swarm-fixtures.ts";
import { testConfig } from "../packages/swarm/test/support/swarm-harness.ts";

const { values } = parseArgs({
  options: {
    sizes: { type: "string", default: "8,16,32,64" },
    "window-s": { type: "string", default: "20" },
    "join-timeout-s": { type: "string", default: "120" },
  },
});
const sizes = values.sizes.split(",").map(Number);
const windowMs = Number(values["window-s"]) * 1000;
const joinTimeoutMs = Number(values["join-timeout-s"]) * 1000;

const COUNTED = {
  gossipsub_rpc_recv_message_total: "msgsIn",
  gossipsub_rpc_sent_message_total: "msgsOut",
  gossipsub_rpc_recv_count_total: "framesIn",
  gossipsub_rpc_sent_count_total: "framesOut",
  gossipsub_rpc_recv_bytes_total: "bytesIn",
  gossipsub_rpc_sent_bytes_total: "bytesOut",
} as const;
type Counter = (typeof COUNTED)[keyof typeof COUNTED];
type Counts = Record<Counter, number>;

/** A MetricsRegister that sums the unlabelled counters above and ignores the rest. */
function counters(): { register: MetricsRegister; counts: Counts } {
  const counts: Counts = { msgsIn: 0, msgsOut: 0, framesIn: 0, framesOut: 0, bytesIn: 0, bytesOut: 0 };
  const ignored = { inc: () => undefined, set: () => undefined, addCollect: () => undefined };
  const histogram = { startTimer: () => () => undefined, observe: () => undefined, reset: () => undefined };
  const register = {
    gauge: (config: { name: string }) => {
      const key = (COUNTED as Record<string, Counter | undefined>)[config.name];
      if (key === undefined) return ignored;
      return {
        inc: (value?: number) => {
          counts[key] += value ?? 1;
        },
        set: () => undefined,
        addCollect: () => undefined,
      };
    },
    histogram: () => histogram,
    avgMinMax: () => ({ set: () => undefined }),
  } as unknown as MetricsRegister;
  return { register, counts };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface Row {
  n: number;
  joined: boolean;
  joinSeconds: number;
  perPeer: Counts;
  periodMs: number;
}

async function run(n: number): Promise<Row> {
  const authority = new TestAuthority(`exp-progress-${n}`);
  const config = parseExperimentConfig(testConfig);
  const swarms: Swarm[] = [];
  const meters: Counts[] = [];
  const start = async (bootstrap: string[]) => {
    const identity = generateKeyPair();
    const pass = { username: `user-${swarms.length}`, role: "trainer" } as const;
    const meter = counters();
    const swarm = await Swarm.create({
      experimentId: authority.experimentId,
      identity,
      authorityPublicKey: authority.keyPair.publicKey,
      pass: authority.pass(identity, pass),
      refreshPass: () => Promise.resolve(authority.pass(identity, pass)),
      mode: "node",
      checkReachability: false,
      listen: ["/ip4/127.0.0.1/tcp/0"],
      bootstrap,
      logger: silentLogger,
      config,
      getState: () => null,
      progressIntervalMs: 1_000,
      pubsubMetrics: meter.register,
    });
    swarms.push(swarm);
    meters.push(meter.counts);
    await swarm.start();
    return swarm;
  };
  const first = await start([]);
  const bootstrap = first.node.multiaddrs();
  for (let i = 1; i < n; i += 8) {
    await Promise.all(Array.from({ length: Math.min(8, n - i) }, () => start(bootstrap)));
  }
  let epoch = 1;
  let samples = 0;
  const report = () => {
    samples += 1;
    for (const swarm of swarms) {
      swarm.progress.report({ epoch, samplesAccumulated: samples, samplesPerSecond: 2 });
    }
  };
  const joinStart = Date.now();
  let joined = false;
  while (Date.now() - joinStart < joinTimeoutMs) {
    report();
    if (swarms.every((swarm) => swarm.progress.swarmSize() === n)) {
      joined = true;
      break;
    }
    await sleep(500);
  }
  const joinSeconds = (Date.now() - joinStart) / 1000;
  const before = meters.map((counts) => ({ ...counts }));
  const windowStart = Date.now();
  let nextEpochAt = windowStart + 6_000;
  while (Date.now() - windowStart < windowMs) {
    if (Date.now() >= nextEpochAt) {
      epoch += 1;
      samples = 0;
      nextEpochAt += 6_000;
    }
    report();
    await sleep(500);
  }
  const seconds = (Date.now() - windowStart) / 1000;
  const perPeer = { msgsIn: 0, msgsOut: 0, framesIn: 0, framesOut: 0, bytesIn: 0, bytesOut: 0 };
  meters.forEach((counts, i) => {
    for (const key of Object.keys(perPeer) as Counter[]) {
      perPeer[key] += (counts[key] - (before[i]?.[key] ?? 0)) / seconds / n;
    }
  });
  const periodMs = swarms.reduce((sum, swarm) => sum + swarm.progress.periodMs(), 0) / n;
  await Promise.all(swarms.map((swarm) => swarm.stop()));
  return { n, joined, joinSeconds, perPeer, periodMs };
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
  const ratio = (key: Counter) => (large.perPeer[key] / small.perPeer[key]).toFixed(2);
  console.log("");
  console.log(
    `ratio n=${large.n} / n=${small.n}: msgs in ${ratio("msgsIn")}, msgs out ${ratio("msgsOut")}, ` +
      `bytes in ${ratio("bytesIn")}, bytes out ${ratio("bytesOut")} (direct push: ${((large.n - 1) / (small.n - 1)).toFixed(2)})`,
  );
}
process.exit(0);
