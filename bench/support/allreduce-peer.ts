/**
 * Both ends of the all-reduce benchmarks' peer protocol (bench/allreduce-bandwidth.ts and
 * bench/allreduce-load-balancing.ts).
 *
 * Run as a program (`node bench/support/allreduce-peer.ts '<PeerSpec JSON>'`, one per netlab host),
 * it starts a `Swarm`, prints JSON lines on stdout and obeys JSON commands on stdin:
 *   → {"type":"ready", peerId, multiaddrs}        once listening (bootstrap peers dialled)
 *   → {"type":"link", …LinkEstimate}              with a `probe` server: its speed test's result
 *   → {"type":"meshed"}                           once connected to every other peer
 *   ← {"cmd":"sync", epoch}                        report progress at `epoch`, push it, wait until
 *   → {"type":"synced", epoch}                       every other peer's record is at `epoch`
 *   ← {"cmd":"average", epoch, startAt, loadBalancing}
 *   → {"type":"done", …timings} | {"type":"failed", …}
 *   ← {"cmd":"stop"}                               stop the swarm and exit 0
 * `average` sleeps until `startAt` (Unix ms; all peers share the machine's clock), sets the
 * experiment config's `averaging.loadBalancing` (the averager reads it on every call, so both modes
 * run on the same processes and links) and calls `swarm.averager.average`. The peer wraps
 * `swarm.allreduce.run` to time the all-reduce alone: matchmaking and the LP happen before `run`
 * starts. It reports run start/end, the CPU time the process used during `run`, its part size, the
 * result's SHA-256 and the result at a few sample indices (the parent checks the weighted mean).
 * With `probeServer` it is an aux-mode peer that only serves speed tests (`Swarm.measureLink`), until
 * it reads any line or its stdin ends; peers with `probe` and no fixed `bandwidth` measure their link
 * against it before meshing, then leave it.
 *
 * Imported, it gives the parent `withLab` (a lab that is destroyed on exit, errors, Ctrl-C) and
 * `PeerGroup` (launch the peers, sync, time rounds, stop).
 */
import type { ChildProcess } from "node:child_process";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { createInterface } from "node:readline";
import {
  generateKeyPair,
  keyPairFromSecretKey,
  parseExperimentConfig,
  type ExperimentConfigInput,
  type KeyPair,
} from "@barnraise/protocol";
import { peerIdFromString } from "@libp2p/peer-id";
import { pino } from "pino";
import { z } from "zod";
import { NetLab, watchJsonLines, type Host, type JsonLineWatch } from "../../packages/netlab/src/index.ts";
import type { AllReduceRunOptions } from "../../packages/swarm/src/averaging/butterfly-allreduce.ts";
import type { CompressionMethodName } from "../../packages/swarm/src/compression/index.ts";
import { AuthorityKeys } from "../../packages/swarm/src/platform/authority-keys.ts";
import { Swarm } from "../../packages/swarm/src/swarm.ts";
import { TestAuthority } from "../../packages/swarm/test/support/swarm-fixtures.ts";
import { bandwidthSchema, peerIdentityFields } from "./peer-spec.ts";

// ---------------------------------------------------------------- the protocol

const peerSpecSchema = z.strictObject({
  ...peerIdentityFields,
  /** A fixed link capacity for the load balancer; absent: measured by a speed test against `probe`. */
  bandwidth: bandwidthSchema.optional(),
  /** The probe server's addresses: the peer measures its link against it before meshing. */
  probe: z.array(z.string()).optional(),
  /** This process only serves speed tests (an aux peer that never averages). */
  probeServer: z.boolean().optional(),
  config: z.record(z.string(), z.unknown()),
  elements: z.number().int().positive(),
  weight: z.number().positive(),
  peers: z.number().int().min(2),
  sampleIndices: z.array(z.number().int().min(0)),
  keepSlowConnections: z.boolean(),
});
/** What the parent tells one peer process (argv[2], JSON). */
export type PeerSpec = z.infer<typeof peerSpecSchema>;

const commandSchema = z.discriminatedUnion("cmd", [
  z.strictObject({ cmd: z.literal("sync"), epoch: z.number().int().min(0) }),
  z.strictObject({
    cmd: z.literal("average"),
    epoch: z.number().int().min(0),
    startAt: z.number(),
    loadBalancing: z.boolean(),
  }),
  z.strictObject({ cmd: z.literal("stop") }),
]);
type Command = z.infer<typeof commandSchema>;

const readySchema = z.object({
  type: z.literal("ready"),
  peerId: z.string(),
  multiaddrs: z.array(z.string()),
});
const meshedSchema = z.object({ type: z.literal("meshed") });
const linkSchema = z.object({
  type: z.literal("link"),
  uploadBytesPerSecond: z.number(),
  downloadBytesPerSecond: z.number(),
  source: z.string(),
});
const syncedSchema = z.object({ type: z.literal("synced"), epoch: z.number() });
const doneSchema = z.object({
  type: z.literal("done"),
  epoch: z.number(),
  /** Unix ms (fractional): `average` called, `allreduce.run` entered and left, `average` resolved. */
  averageStart: z.number(),
  runStart: z.number(),
  runEnd: z.number(),
  averageEnd: z.number(),
  /** CPU ms (user + system) this process used while `run` was in progress. */
  runCpuMs: z.number(),
  groupSize: z.number(),
  partElements: z.number(),
  bytesSent: z.number(),
  bytesReceived: z.number(),
  /** The largest window (chunks ahead of their results) any of the peer's streams used. */
  largestWindow: z.number(),
  digest: z.string(),
  samples: z.array(z.number()),
  /** The host interface's byte counters during `run` (headers included), and per 100 ms slot. */
  link: z.object({
    txBytes: z.number(),
    rxBytes: z.number(),
    txSlots: z.array(z.number()),
    rxSlots: z.array(z.number()),
  }),
});
const failedSchema = z.object({ type: z.literal("failed"), epoch: z.number(), message: z.string() });
/** One peer's report of one timed round. */
export type PeerRound = z.infer<typeof doneSchema>;

/** Peer `peer`'s value at `element`: cheap, deterministic, different per peer, exact in float32. */
export function benchValue(peer: number, element: number): number {
  return ((element * 7 + peer * 13) % 101) / 64 - 0.75;
}

function now(): number {
  return performance.timeOrigin + performance.now();
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));

// ---------------------------------------------------------------- the peer program

/** Link meter slot: short enough to see idle gaps, long enough to hold many packets. */
export const LINK_SLOT_MS = 100;

function linkCounters(): [number, number] {
  const read = (what: string): number => {
    try {
      return Number(readFileSync(`/sys/class/net/eth0/statistics/${what}_bytes`, "utf8"));
    } catch {
      return NaN; // not in a netlab namespace
    }
  };
  return [read("tx"), read("rx")];
}

/** Samples the host's eth0 byte counters every LINK_SLOT_MS until `stop` (idempotent). */
function startLinkMeter(): { stop: () => PeerRound["link"] } {
  const samples: Array<[number, number]> = [linkCounters()];
  const timer = setInterval(() => samples.push(linkCounters()), LINK_SLOT_MS);
  let result: PeerRound["link"] | undefined;
  return {
    stop: () => {
      if (result !== undefined) return result;
      clearInterval(timer);
      samples.push(linkCounters());
      const slots = (k: 0 | 1) => samples.slice(1).map((sample, i) => sample[k] - (samples[i]?.[k] ?? 0));
      const first = samples[0] ?? [0, 0];
      const last = samples[samples.length - 1] ?? first;
      result = {
        txBytes: last[0] - first[0],
        rxBytes: last[1] - first[1],
        txSlots: slots(0),
        rxSlots: slots(1),
      };
      return result;
    },
  };
}

async function until(condition: () => boolean, what: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting until ${what}`);
    await sleep(20);
  }
}

/**
 * An experiment, not production behaviour: libp2p's connection monitor pings every connection
 * every 10 s and aborts it when the ping takes longer than its adaptive timeout (at least 5 s).
 * During an all-reduce on a slow link the ping waits behind seconds of queued part data, so the
 * monitor kills the very connections the all-reduce uses. This turns the abort off in this process
 * (a runtime switch on libp2p's component), to measure what the all-reduce does without it.
 */
function keepSlowConnections(swarm: Swarm): void {
  const monitor = (swarm.node.libp2p as unknown as { components: Record<string, unknown> }).components
    .connectionMonitor as { abortConnectionOnPingFailure?: boolean } | undefined;
  if (monitor?.abortConnectionOnPingFailure === undefined) {
    throw new Error("libp2p has no connection monitor with abortConnectionOnPingFailure to switch off");
  }
  monitor.abortConnectionOnPingFailure = false;
}

async function runPeer(spec: PeerSpec): Promise<void> {
  const print = (value: object): void => {
    process.stdout.write(`${JSON.stringify(value)}\n`);
  };
  const identity: KeyPair = keyPairFromSecretKey(Buffer.from(spec.secretKey, "base64url"));
  const config = parseExperimentConfig(spec.config);
  const swarm = await Swarm.create({
    experimentId: spec.experimentId,
    identity,
    authority: new AuthorityKeys({
      experimentId: spec.experimentId,
      publicKey: Buffer.from(spec.authorityPublicKey, "base64url"),
    }),
    pass: spec.pass,
    refreshPass: () => Promise.resolve(spec.pass),
    mode: spec.probeServer === true ? "aux" : "node",
    listen: spec.listen,
    bootstrap: spec.bootstrap,
    logger: pino({ level: process.env.BENCH_LOG ?? "warn" }, pino.destination(2)),
    config,
    getState: () => null,
    ...(spec.bandwidth === undefined ? {} : { bandwidth: spec.bandwidth }),
    // Few pushes: 24 peers pushing signed records to each other every second cost real CPU.
    progressIntervalMs: 5_000,
  });

  if (spec.keepSlowConnections) keepSlowConnections(swarm);
  const vector = new Float32Array(spec.elements);
  for (let j = 0; j < vector.length; j++) vector[j] = benchValue(spec.index, j);

  type RunTiming = Pick<
    PeerRound,
    | "runStart"
    | "runEnd"
    | "runCpuMs"
    | "partElements"
    | "bytesSent"
    | "bytesReceived"
    | "largestWindow"
    | "link"
  >;
  const runs: RunTiming[] = [];
  const service = swarm.allreduce;
  const run = service.run.bind(service);
  service.run = async (options: AllReduceRunOptions) => {
    const self = options.group.members.findIndex((member) => member.peerId === swarm.peerId);
    const meter = startLinkMeter();
    const cpu = process.cpuUsage();
    const runStart = now();
    const result = await run(options).finally(() => meter.stop());
    const used = process.cpuUsage(cpu);
    runs.push({
      link: meter.stop(),
      runStart,
      runEnd: now(),
      runCpuMs: (used.user + used.system) / 1000,
      partElements: options.partCounts[self] ?? 0,
      bytesSent: result.bytesSent,
      bytesReceived: result.bytesReceived,
      largestWindow: result.largestWindow,
    });
    return result;
  };

  const handle = async (command: Command): Promise<void> => {
    if (command.cmd === "stop") {
      await swarm.stop();
      process.exit(0);
    }
    if (command.cmd === "sync") {
      swarm.progress.report({ epoch: command.epoch, samplesAccumulated: spec.weight, samplesPerSecond: 1 });
      await swarm.progress.pushNow();
      const atEpoch = () => swarm.progress.records().filter((r) => r.record.epoch === command.epoch).length;
      await until(() => atEpoch() >= spec.peers - 1, `every peer reports epoch ${command.epoch}`, 60_000);
      print({ type: "synced", epoch: command.epoch });
      return;
    }
    await sleep(command.startAt - Date.now());
    config.averaging.loadBalancing = command.loadBalancing;
    const before = runs.length;
    const averageStart = now();
    try {
      const outcome = await swarm.averager.average(command.epoch, vector, spec.weight);
      const averageEnd = now();
      const lastRun = runs[before];
      if (lastRun === undefined) throw new Error("average returned without running an all-reduce");
      const bytes = new Uint8Array(
        outcome.vector.buffer,
        outcome.vector.byteOffset,
        outcome.vector.byteLength,
      );
      print({
        type: "done",
        epoch: command.epoch,
        averageStart,
        averageEnd,
        ...lastRun,
        groupSize: outcome.groupSize,
        digest: createHash("sha256").update(bytes).digest("hex").slice(0, 16),
        samples: spec.sampleIndices.map((j) => outcome.vector[j] ?? NaN),
      } satisfies PeerRound);
    } catch (error) {
      print({
        type: "failed",
        epoch: command.epoch,
        message: error instanceof Error ? error.message : String(error),
      });
    }
  };

  await swarm.start();
  print({ type: "ready", peerId: swarm.peerId, multiaddrs: swarm.node.multiaddrs() });
  if (spec.probeServer === true) {
    // Serves speed tests until told to stop (stdin ends or a "stop" line).
    createInterface({ input: process.stdin }).on("line", () => {
      void swarm.stop().finally(() => process.exit(0));
    });
    process.stdin.on("end", () => {
      void swarm.stop().finally(() => process.exit(0));
    });
    return;
  }
  if (spec.probe !== undefined) {
    // As a volunteer's peer does against an aux: a speed test, retried while the server is busy,
    // and after a failure (24 processes starting at once on 2 cores can time a hello out, and the
    // connection with it) over a new connection, a few times.
    let server = await swarm.node.connect(spec.probe[0] ?? "");
    for (let failures = 0; ;) {
      try {
        print({ type: "link", ...(await swarm.measureLink(server)) });
        break;
      } catch (error) {
        const busy = error instanceof Error && "remoteCode" in error && error.remoteCode === "BUSY";
        if (!busy && ++failures >= 5) throw error;
        await sleep(250 + Math.random() * 1000);
        if (!busy) server = await swarm.node.connect(spec.probe[0] ?? "");
      }
    }
    // Done with it: the rounds are the peers' alone.
    swarm.node.authorizer.deny(server, "the speed test is done");
    await swarm.node.libp2p.hangUp(peerIdFromString(server)).catch(() => undefined);
  }
  const trainers = () => swarm.node.members().filter((peer) => swarm.node.modeOf(peer) !== "aux");
  await until(() => trainers().length >= spec.peers - 1, "connected to every peer", 120_000);
  print({ type: "meshed" });
  // Commands run one at a time, in order.
  let queue = Promise.resolve();
  createInterface({ input: process.stdin }).on("line", (line) => {
    const command = commandSchema.parse(JSON.parse(line));
    queue = queue
      .then(() => handle(command))
      .catch((error: unknown) => {
        // A peer that cannot follow the script ends; the parent sees the exit and this stderr.
        process.stderr.write(`peer ${spec.index}: ${error instanceof Error ? error.stack : String(error)}\n`);
        process.exit(1);
      });
  });
  process.stdin.on("end", () => {
    void swarm.stop().finally(() => process.exit(0));
  });
}

// ---------------------------------------------------------------- the parent's side

/**
 * Creates a lab named `name` (removing a crashed run's leftovers first), runs `body`, and destroys
 * the lab afterwards, also on errors and on SIGINT/SIGTERM/SIGHUP (then exits with 130/143).
 */
export async function withLab<T>(name: string, body: (lab: NetLab) => Promise<T>): Promise<T> {
  await NetLab.cleanupStale(name);
  const lab = await NetLab.create({ name });
  const onSignal = (signal: NodeJS.Signals): void => {
    const exit = (): never => process.exit(signal === "SIGINT" ? 130 : 143);
    lab.destroy().then(exit, exit);
    try {
      process.stderr.write(`\n${signal}: destroying lab ${name}…\n`);
    } catch {
      // stderr may be a closed pipe; the lab is being destroyed either way
    }
  };
  const signals = ["SIGINT", "SIGTERM", "SIGHUP"] as const;
  // A closed stdout (e.g. piped into a pager that quit) must not crash the run before cleanup.
  const ignore = (): void => undefined;
  process.stdout.on("error", ignore);
  for (const signal of signals) process.once(signal, onSignal);
  try {
    return await body(lab);
  } finally {
    await lab.destroy();
    for (const signal of signals) process.off(signal, onSignal);
    process.stdout.off("error", ignore);
  }
}

/**
 * Sets the TCP congestion control of each host's namespace (a per-namespace sysctl; new namespaces
 * inherit the machine's, e.g. bbr), or leaves it when `algorithm` is empty. Returns what is in use.
 */
export async function useCongestionControl(hosts: readonly Host[], algorithm: string): Promise<string> {
  const key = "net.ipv4.tcp_congestion_control";
  if (algorithm !== "")
    await Promise.all(hosts.map((host) => host.exec("sysctl", ["-qw", `${key}=${algorithm}`])));
  const [first] = hosts;
  return first === undefined ? "?" : (await first.exec("sysctl", ["-n", key])).stdout.trim();
}

/** The first line of an error's message (a failed round's error carries the peers' stderr below it). */
/** A progress line with the wall-clock time in front. */
export function log(line: string): void {
  console.log(`[${new Date().toISOString().slice(11, 19)}] ${line}`);
}

export { median } from "./peer-table.ts";

export function firstLine(error: unknown): string {
  return (error instanceof Error ? error.message : String(error)).split("\n")[0] ?? "";
}

/** The product's averaging defaults, which the benchmarks' chunk flags default to. */
export const DEFAULT_AVERAGING = parseExperimentConfig({}).averaging;

/**
 * The experiment config both all-reduce benchmarks run: no compression unless asked, one all-reduce
 * of the whole group, and a round deadline of five times the modelled time (at least a minute),
 * generous but short enough that a stuck round fails instead of hanging the bench.
 */
export function benchConfig(options: {
  maxGroupSize: number;
  modelSeconds: number;
  chunkKib: number;
  chunksInFlight: number;
  /** The most chunks a stream's window may grow to; default the config's. */
  maxChunksInFlight?: number;
  loadBalancing?: boolean;
  compression?: CompressionMethodName;
}): ExperimentConfigInput {
  return {
    training: { targetBatchSize: 1_000_000 },
    compression: { method: options.compression ?? "none" },
    averaging: {
      maxGroupSize: options.maxGroupSize,
      matchmakingTimeoutMs: 60_000,
      allreduceTimeoutMs: Math.round(Math.max(60, 5 * options.modelSeconds) * 1000),
      chunkSizeBytes: options.chunkKib * 1024,
      chunksInFlight: options.chunksInFlight,
      ...(options.maxChunksInFlight === undefined ? {} : { maxChunksInFlight: options.maxChunksInFlight }),
      ...(options.loadBalancing === undefined ? {} : { loadBalancing: options.loadBalancing }),
    },
  };
}

export interface PeerLaunch {
  host: Host;
  /** A fixed capacity for the load balancer; absent: measured against the group's probe host. */
  bandwidth?: { uploadBytesPerSecond: number; downloadBytesPerSecond: number };
  weight: number;
}

/** The outcome of one timed round over all peers. */
export interface RoundReport {
  epoch: number;
  loadBalancing: boolean;
  /** Last `run` end − first `run` start: the all-reduce, without matchmaking or the LP. */
  seconds: number;
  /** Last `run` start − first `run` start (how unevenly the group's members got going). */
  startSpreadSeconds: number;
  /** Last `average` end − `startAt` (matchmaking included). */
  averageSeconds: number;
  /** Σ CPU seconds the peer processes used during their `run`, over the round's wall time. */
  peerCpuCores: number;
  /** Busy fraction of the whole machine (all processes, from /proc/stat) during the round. */
  machineBusy: number;
  peers: PeerRound[];
}

/** Reads /proc/stat's aggregate line: [busy, total] jiffies. */
async function cpuJiffies(): Promise<[number, number]> {
  const line = (await readFile("/proc/stat", "utf8")).split("\n")[0] ?? "";
  const fields = line.trim().split(/\s+/).slice(1).map(Number);
  const total = fields.reduce((sum, v) => sum + v, 0);
  const idle = (fields[3] ?? 0) + (fields[4] ?? 0);
  return [total - idle, total];
}

export interface MeasuredLink {
  readonly uploadBytesPerSecond: number;
  readonly downloadBytesPerSecond: number;
}

interface RunningPeer {
  launch: PeerLaunch;
  child: ChildProcess;
  watch: JsonLineWatch;
}

const PEER_SCRIPT = fileURLToPath(import.meta.url);
const PORT = 4001;

interface GroupSpec {
  elements: number;
  sampleIndices: number[];
  /** Largest allowed |result − weighted mean| at the sample indices (0 up to float rounding without compression). */
  tolerance: number;
  /** How long the parent waits for a round's reports before giving up. */
  roundTimeoutMs: number;
}

/**
 * Peer processes, one per host, forming one swarm. Each host gets a fresh identity and pass; peer 0
 * is the bootstrap peer of the others. Every peer averages `elements` float32 values of
 * `benchValue(index, ·)` with its launch weight.
 */
export class PeerGroup {
  readonly #peers: RunningPeer[];
  readonly #spec: GroupSpec;
  /** Per peer, the link its speed test measured (undefined for a peer given a fixed bandwidth). */
  readonly measuredLinks: readonly (MeasuredLink | undefined)[];
  #epoch = 0;

  private constructor(peers: RunningPeer[], spec: GroupSpec, measuredLinks: (MeasuredLink | undefined)[]) {
    this.#peers = peers;
    this.#spec = spec;
    this.measuredLinks = measuredLinks;
  }

  static async launch(
    launches: readonly PeerLaunch[],
    options: {
      elements: number;
      config: ExperimentConfigInput;
      log: (line: string) => void;
      /** Stop libp2p's connection monitor from aborting connections whose ping is slow (see keepSlowConnections). */
      keepSlowConnections?: boolean;
      /**
       * A host for a speed-test server (an aux-mode peer that never averages): every peer without a
       * fixed `bandwidth` measures its link against it first, as a volunteer's peer does against
       * the run's aux. It stops before the first round.
       */
      probeHost?: Host;
    },
  ): Promise<PeerGroup> {
    const authority = new TestAuthority("bench-allreduce");
    const sampleIndices = Array.from({ length: 16 }, (_, k) => Math.floor((k * (options.elements - 1)) / 15));
    let probe: string[] | undefined;
    const spawnPeer = (
      launch: PeerLaunch,
      index: number,
      bootstrap: string[],
      probeServer = false,
    ): RunningPeer => {
      const keys = generateKeyPair();
      const role = probeServer ? "aux" : "trainer";
      const spec: PeerSpec = {
        index,
        experimentId: authority.experimentId,
        secretKey: Buffer.from(keys.secretKey).toString("base64url"),
        authorityPublicKey: Buffer.from(authority.keyPair.publicKey).toString("base64url"),
        pass: authority.pass(keys, { username: `peer${index}`, role, lifetimeMs: 6 * 3_600_000 }),
        listen: [`/ip4/${launch.host.address}/tcp/${PORT}`],
        bootstrap,
        ...(launch.bandwidth === undefined ? {} : { bandwidth: launch.bandwidth }),
        ...(probe === undefined || launch.bandwidth !== undefined ? {} : { probe }),
        ...(probeServer ? { probeServer } : {}),
        config: options.config,
        elements: options.elements,
        weight: launch.weight,
        peers: launches.length,
        sampleIndices,
        keepSlowConnections: options.keepSlowConnections ?? false,
      };
      const child = launch.host.spawnNode(PEER_SCRIPT, [JSON.stringify(spec)], {
        stdio: ["pipe", "pipe", "pipe"],
      });
      // A peer that died has a closed stdin; its exit is reported by the line watcher instead.
      child.stdin?.on("error", () => undefined);
      return { launch, child, watch: watchJsonLines(child) };
    };
    const started = Date.now();
    let server: RunningPeer | undefined;
    if (options.probeHost !== undefined) {
      server = spawnPeer({ host: options.probeHost, weight: 1 }, launches.length, [], true);
      probe = (await waitLine(server, readySchema, 60_000)).multiaddrs;
    }
    const peers: RunningPeer[] = [];
    const first = launches[0];
    if (first === undefined) throw new Error("no peers to launch");
    peers.push(spawnPeer(first, 0, []));
    const firstReady = await waitLine(peers[0], readySchema, 60_000);
    const bootstrap = firstReady.multiaddrs;
    launches.slice(1).forEach((launch, k) => peers.push(spawnPeer(launch, k + 1, bootstrap)));
    await Promise.all(peers.map((peer) => waitLine(peer, readySchema, 120_000)));
    options.log(`  ${peers.length} peers listening after ${((Date.now() - started) / 1000).toFixed(1)} s`);
    let links: (z.infer<typeof linkSchema> | undefined)[] = [];
    if (server !== undefined) {
      links = await Promise.all(
        peers.map((peer) =>
          peer.launch.bandwidth === undefined
            ? waitLine(peer, linkSchema, 180_000)
            : Promise.resolve(undefined),
        ),
      );
      send(server, { cmd: "stop" });
      options.log(`  links measured after ${((Date.now() - started) / 1000).toFixed(1)} s`);
    }
    await Promise.all(peers.map((peer) => waitLine(peer, meshedSchema, 180_000)));
    options.log(`  full mesh after ${((Date.now() - started) / 1000).toFixed(1)} s`);
    const { matchmakingTimeoutMs = 15_000, allreduceTimeoutMs = 60_000 } = options.config.averaging ?? {};
    const roundTimeoutMs = matchmakingTimeoutMs + allreduceTimeoutMs + 30_000;
    // benchValue lies in [−0.75, 0.82]: 8-bit codecs err by at most a step of 1/254 of the range.
    const tolerance = (options.config.compression?.method ?? "none") === "none" ? 1e-5 : 0.01;
    return new PeerGroup(
      peers,
      { elements: options.elements, sampleIndices, roundTimeoutMs, tolerance },
      links.map((link) =>
        link === undefined
          ? undefined
          : {
              uploadBytesPerSecond: link.uploadBytesPerSecond,
              downloadBytesPerSecond: link.downloadBytesPerSecond,
            },
      ),
    );
  }

  /**
   * One round: sync progress at a new epoch, start `average` on every peer at the same instant,
   * collect the reports and check that every peer got the same, correct weighted mean.
   */
  async round(loadBalancing: boolean): Promise<RoundReport> {
    const epoch = this.#epoch++;
    for (const peer of this.#peers) send(peer, { cmd: "sync", epoch });
    await Promise.all(
      this.#peers.map((peer) =>
        waitLine(peer, syncedSchema, this.#spec.roundTimeoutMs, (s) => s.epoch === epoch),
      ),
    );
    const startAt = Date.now() + 300;
    const cpuBefore = await cpuJiffies();
    for (const peer of this.#peers) send(peer, { cmd: "average", epoch, startAt, loadBalancing });
    const outcomes = await Promise.all(
      this.#peers.map((peer) =>
        waitLine(
          peer,
          z.union([doneSchema, failedSchema]),
          this.#spec.roundTimeoutMs,
          (line) => line.epoch === epoch,
        ),
      ),
    );
    const cpuAfter = await cpuJiffies();
    const rounds: PeerRound[] = [];
    for (const [k, outcome] of outcomes.entries()) {
      if (outcome.type === "failed") {
        const stderr = this.#peers.flatMap((peer, i) =>
          peer.watch.stderr === "" ? [] : [`--- peer ${i} stderr (tail):\n${peer.watch.stderr.slice(-3000)}`],
        );
        throw new Error(`peer ${k} failed round ${epoch}: ${outcome.message}\n${stderr.join("\n")}`);
      }
      rounds.push(outcome);
    }
    this.#check(rounds, epoch);
    const firstStart = Math.min(...rounds.map((r) => r.runStart));
    const lastEnd = Math.max(...rounds.map((r) => r.runEnd));
    const wall = (lastEnd - firstStart) / 1000;
    return {
      epoch,
      loadBalancing,
      seconds: wall,
      startSpreadSeconds: (Math.max(...rounds.map((r) => r.runStart)) - firstStart) / 1000,
      averageSeconds: (Math.max(...rounds.map((r) => r.averageEnd)) - startAt) / 1000,
      peerCpuCores: rounds.reduce((sum, r) => sum + r.runCpuMs, 0) / 1000 / wall,
      machineBusy: (cpuAfter[0] - cpuBefore[0]) / Math.max(1, cpuAfter[1] - cpuBefore[1]),
      peers: rounds,
    };
  }

  /** Every peer has the same bytes, equal to the weighted mean at the sample indices. */
  #check(rounds: readonly PeerRound[], epoch: number): void {
    const digests = new Set(rounds.map((r) => r.digest));
    if (digests.size !== 1)
      throw new Error(`round ${epoch}: peers disagree on the result (${digests.size} digests)`);
    const totalWeight = this.#peers.reduce((sum, p) => sum + p.launch.weight, 0);
    const [first] = rounds;
    this.#spec.sampleIndices.forEach((j, k) => {
      const expected =
        this.#peers.reduce((sum, p, i) => sum + p.launch.weight * benchValue(i, j), 0) / totalWeight;
      const got = first?.samples[k] ?? NaN;
      if (!(Math.abs(got - expected) <= this.#spec.tolerance)) {
        throw new Error(`round ${epoch}: element ${j} is ${got}, the weighted mean is ${expected}`);
      }
    });
    if (rounds.some((r) => r.groupSize !== this.#peers.length)) {
      throw new Error(`round ${epoch}: not every peer averaged in one group of ${this.#peers.length}`);
    }
  }

  /**
   * TCP and shaping counters of every host, cumulative (diff two calls): segments retransmitted,
   * retransmission timeouts, tail-loss probes, and packets the host's upload tbf dropped.
   */
  async netCounters(): Promise<NetCounters[]> {
    return Promise.all(this.#peers.map((peer) => hostCounters(peer.launch.host)));
  }

  /** Asks every peer to stop and waits (briefly) for them to exit; the lab kills stragglers. */
  async stop(): Promise<void> {
    for (const peer of this.#peers) {
      if (peer.child.exitCode === null) send(peer, { cmd: "stop" });
    }
    await Promise.race([Promise.all(this.#peers.map((peer) => peer.watch.exited)), sleep(10_000)]);
  }
}

/**
 * Per peer: its part, bytes through its interface during `run` as a share of what its link could
 * carry in the round, and the tx/rx timelines over the round (see LINK_SLOT_MS).
 */
export function linkTrace(report: RoundReport, mbitOf: (peer: number) => number): string[] {
  const firstStart = Math.min(...report.peers.map((p) => p.runStart));
  const glyph = (share: number): string =>
    share >= 0.9 ? "█" : share >= 0.6 ? "▆" : share >= 0.3 ? "▃" : share > 0.03 ? "▁" : "·";
  return report.peers.flatMap((p, i) => {
    const slotBytes = (mbitOf(i) * 1e6 * LINK_SLOT_MS) / 1000 / 8;
    const lead = "·".repeat(Math.round((p.runStart - firstStart) / LINK_SLOT_MS));
    const line = (slots: readonly number[]) => lead + slots.map((b) => glyph(b / slotBytes)).join("");
    const capacity = (mbitOf(i) * 1e6 * report.seconds) / 8;
    const share = (bytes: number) => `${((bytes / capacity) * 100).toFixed(0)}%`.padStart(4);
    const head = `peer ${String(i).padStart(2)} part ${String(p.partElements).padStart(8)}`;
    return [
      `${head} up ${share(p.link.txBytes)} ${line(p.link.txSlots)}`,
      `${" ".repeat(head.length)} dn ${share(p.link.rxBytes)} ${line(p.link.rxSlots)}`,
    ];
  });
}

/** See {@link PeerGroup.netCounters}. */
export interface NetCounters {
  retransSegs: number;
  timeouts: number;
  lossProbes: number;
  uploadDrops: number;
}

async function hostCounters(host: Host): Promise<NetCounters> {
  const [nstat, qdisc] = await Promise.all([
    host.exec("nstat", ["-asz", "TcpRetransSegs", "TcpExtTCPTimeouts", "TcpExtTCPLossProbes"]),
    host.exec("tc", ["-s", "qdisc", "show", "dev", "eth0"]),
  ]);
  const counter = (name: string): number =>
    Number(new RegExp(`^${name}\\s+(\\d+)`, "m").exec(nstat.stdout)?.[1] ?? NaN);
  const drops = [...qdisc.stdout.matchAll(/dropped (\d+)/g)].reduce((sum, m) => sum + Number(m[1]), 0);
  return {
    retransSegs: counter("TcpRetransSegs"),
    timeouts: counter("TcpExtTCPTimeouts"),
    lossProbes: counter("TcpExtTCPLossProbes"),
    uploadDrops: drops,
  };
}

function send(peer: RunningPeer, command: Command): void {
  if (peer.child.exitCode !== null || peer.child.stdin?.writable !== true) return;
  peer.child.stdin.write(`${JSON.stringify(command)}\n`);
}

async function waitLine<T extends z.ZodType>(
  peer: RunningPeer | undefined,
  schema: T,
  timeoutMs: number,
  accept: (value: z.infer<T>) => boolean = () => true,
): Promise<z.infer<T>> {
  if (peer === undefined) throw new Error("no such peer");
  const isWanted = (value: unknown): value is z.infer<T> => {
    const parsed = schema.safeParse(value);
    return parsed.success && accept(parsed.data);
  };
  return peer.watch.waitFor(isWanted, timeoutMs);
}

if (import.meta.main) {
  await runPeer(peerSpecSchema.parse(JSON.parse(process.argv[2] ?? "null")));
}
