/**
 * A swarm peer in its own process, for the multi-process and network-namespace tests. Run as
 * `node peer-process.ts '<PeerProcessOptions as JSON>'` with stdin piped. It starts a `Swarm`, prints
 * JSON-line events on stdout ({@link PeerEvent}) and takes one command a line on stdin:
 *
 *   sync <epoch> <others>  report progress at <epoch> with the script's weight, push it, and wait until
 *                          <others> other peers are at that epoch too        → synced | failed
 *   go <epoch>             average the script's vector for <epoch>            → averaged | failed
 *   connect <multiaddr>    dial and say hello                                 → connected | failed
 *   dial-fresh <multiaddr> open a new connection there (even when connected), then close it
 *                                                                            → dialed | failed
 *   connections            every open connection's peer and remote address  → connections
 *
 * It prints `ready` once started, `members` and `addrs` whenever they change, and stops the swarm and
 * exits 0 on SIGTERM or when stdin closes (so a crashed parent leaves no peer behind). The parent's
 * side is {@link PeerProcess}.
 */
import { spawn, type ChildProcess, type StdioOptions } from "node:child_process";
import { createHash } from "node:crypto";
import { createInterface } from "node:readline";
import { multiaddr } from "@multiformats/multiaddr";
import { watchJsonLines, type ChildOutcome, type JsonLineWatch } from "@barnraise/netlab";
import { fromBase64Url, keyPairFromSecretKey, parseExperimentConfig } from "@barnraise/protocol";
import { pino } from "pino";
import { z } from "zod";
import { isSwarmError } from "../../src/errors.ts";
import { AuthorityKeys } from "../../src/platform/authority-keys.ts";
import { Swarm } from "../../src/swarm.ts";
import { RateCap } from "../../src/rpc/traffic-caps.ts";
import { randomVector, seededRandom } from "./swarm-harness.ts";

const optionsSchema = z.strictObject({
  /** The identity's 64-byte secret key, base64url. */
  secretKey: z.string(),
  pass: z.string(),
  /** base64url */
  authorityPublicKey: z.string(),
  experimentId: z.string(),
  mode: z.enum(["node", "client", "aux"]),
  listen: z.array(z.string()),
  bootstrap: z.array(z.string()).default([]),
  listenViaRelays: z.boolean().default(false),
  /** An `ExperimentConfigInput`. */
  config: z.unknown(),
  /** What to average at each epoch: a seeded random vector and its weight. */
  script: z.strictObject({
    epochs: z.array(
      z.strictObject({
        epoch: z.number().int().nonnegative(),
        vector: z.strictObject({ seed: z.number().int(), length: z.number().int().positive() }),
        weight: z.number().nonnegative(),
      }),
    ),
  }),
  logLevel: z.string().default("warn"),
  progressIntervalMs: z.number().int().positive().default(200),
  /** The volunteer's traffic caps, bytes per second (see TrafficCaps). */
  caps: z
    .strictObject({ upload: z.number().positive().optional(), download: z.number().positive().optional() })
    .optional(),
});

/** The JSON a peer process is started with. */
export type PeerProcessOptions = z.input<typeof optionsSchema>;

export type PeerEvent =
  | { event: "ready"; peerId: string; addrs: string[] }
  | { event: "members"; count: number; peers: string[] }
  | { event: "addrs"; addrs: string[] }
  | { event: "synced"; epoch: number; count: number }
  | {
      event: "averaged";
      epoch: number;
      /** sha256 (hex) of the result's float32 bytes: equal on every member iff bit-identical. */
      checksum: string;
      /** Members of the last round's group. */
      groupSize: number;
      totalWeight: number;
      rounds: number;
      /** The Moshpit grid's extent along each dimension, as this peer planned it when it started. */
      radices: number[];
      /** Peers left out of a round of this step, with the reason (`AverageOutcome.exclusions`). */
      exclusions: Array<{ peer: string; reason: string }>;
      bytesAggregated: number;
      firstValues: number[];
      /** The whole result, float32 little-endian, base64. */
      vector: string;
      /** This peer's bytes on the wire in the step, each way, and how long the step took (s). */
      bytesSent: number;
      bytesReceived: number;
      seconds: number;
    }
  | { event: "connected"; address: string; peer: string }
  | { event: "dialed"; address: string; remoteAddr: string }
  | { event: "connections"; connections: Array<{ peer: string; remoteAddr: string; direction: string }> }
  | { event: "failed"; command: string; epoch?: number; address?: string; code: string; message: string };

const SYNC_TIMEOUT_MS = 15_000;

function emit(event: PeerEvent): void {
  process.stdout.write(`${JSON.stringify(event)}\n`);
}

function failure(
  command: string,
  error: unknown,
  extra: { epoch?: number; address?: string } = {},
): PeerEvent {
  const code = isSwarmError(error) ? error.code : error instanceof Error ? error.name : "UNKNOWN";
  return {
    event: "failed",
    command,
    ...extra,
    code,
    message: error instanceof Error ? error.message : String(error),
  };
}

/** The float32 vector inside an `averaged` event. */
export function decodeVector(base64: string): Float32Array {
  const bytes = new Uint8Array(Buffer.from(base64, "base64"));
  return new Float32Array(bytes.buffer, 0, bytes.byteLength / 4);
}

async function main(): Promise<void> {
  const options = optionsSchema.parse(JSON.parse(process.argv[2] ?? "null"));
  const identity = keyPairFromSecretKey(fromBase64Url(options.secretKey, "secretKey"));
  const logger = pino({ level: options.logLevel }, pino.destination({ fd: 2, sync: true }));
  const swarm = await Swarm.create({
    experimentId: options.experimentId,
    identity,
    authority: new AuthorityKeys({
      experimentId: options.experimentId,
      publicKey: fromBase64Url(options.authorityPublicKey, "authorityPublicKey"),
    }),
    pass: options.pass,
    // The parent minted the pass for the whole test; there is nobody to ask for a new one.
    refreshPass: () => Promise.resolve(options.pass),
    mode: options.mode,
    listen: options.listen,
    bootstrap: options.bootstrap,
    listenViaRelays: options.listenViaRelays,
    logger,
    helloTimeoutMs: 10_000,
    config: parseExperimentConfig(options.config),
    getState: () => null,
    progressIntervalMs: options.progressIntervalMs,
    ...(options.caps === undefined
      ? {}
      : {
          caps: {
            ...(options.caps.upload === undefined ? {} : { upload: new RateCap(options.caps.upload) }),
            ...(options.caps.download === undefined ? {} : { download: new RateCap(options.caps.download) }),
          },
        }),
  });
  await swarm.start();
  emit({ event: "ready", peerId: swarm.peerId, addrs: swarm.node.multiaddrs() });

  let members = "";
  let addrs = swarm.node.multiaddrs().join(" ");
  const watcher = setInterval(() => {
    const peers = swarm.node.members().sort();
    if (peers.join(" ") !== members) {
      members = peers.join(" ");
      emit({ event: "members", count: peers.length, peers });
    }
    const now = swarm.node.multiaddrs();
    if (now.join(" ") !== addrs) {
      addrs = now.join(" ");
      emit({ event: "addrs", addrs: now });
    }
  }, 50);

  let stopping: Promise<void> | undefined;
  const shutdown = (): Promise<void> => {
    stopping ??= (async () => {
      clearInterval(watcher);
      setTimeout(() => process.exit(1), 5_000).unref();
      await swarm.stop();
      process.exit(0);
    })();
    return stopping;
  };

  const epochScript = (epoch: number) => {
    const entry = options.script.epochs.find((candidate) => candidate.epoch === epoch);
    if (entry === undefined) throw new Error(`the script has no epoch ${epoch}`);
    return entry;
  };

  const commands: Record<string, (args: string[]) => Promise<PeerEvent>> = {
    sync: async ([epochText, othersText]) => {
      const epoch = Number(epochText);
      const others = Number(othersText);
      const { weight } = epochScript(epoch);
      // An aux is counted in only while its record names the round it is about to help, and it
      // claims no samples or throughput (its peers refuse a record that does).
      const progress =
        swarm.node.mode === "aux"
          ? { samplesAccumulated: 0, samplesPerSecond: 0, averagingEpoch: epoch }
          : { samplesAccumulated: weight, samplesPerSecond: 10 };
      swarm.progress.report({ epoch, ...progress });
      // Not waiting for every push: one to a frozen member would hold the command up.
      await Promise.race([swarm.progress.pushNow(), new Promise((resolve) => setTimeout(resolve, 2_000))]);
      const deadline = Date.now() + SYNC_TIMEOUT_MS;
      for (;;) {
        const count = swarm.progress.records().filter((entry) => entry.record.epoch === epoch).length;
        if (count >= others) return { event: "synced", epoch, count };
        if (Date.now() > deadline) {
          return failure("sync", new Error(`saw ${count} of ${others} peers at epoch ${epoch}`), { epoch });
        }
        await new Promise((resolve) => setTimeout(resolve, 25));
      }
    },
    go: async ([epochText]) => {
      const epoch = Number(epochText);
      try {
        const { vector, weight } = epochScript(epoch);
        const input = randomVector(vector.length, seededRandom(vector.seed));
        const { radices } = swarm.averager.plan(epoch);
        const started = performance.now();
        const result = await swarm.averager.average(epoch, input, weight);
        const seconds = (performance.now() - started) / 1000;
        const bytes = Buffer.from(result.vector.buffer, result.vector.byteOffset, result.vector.byteLength);
        return {
          event: "averaged",
          epoch,
          checksum: createHash("sha256").update(bytes).digest("hex"),
          groupSize: result.groupSize,
          totalWeight: result.totalWeight,
          rounds: result.rounds,
          radices: [...radices],
          exclusions: result.exclusions ?? [],
          bytesAggregated: swarm.averager.bytesAggregated,
          firstValues: Array.from(result.vector.subarray(0, 4)),
          vector: bytes.toString("base64"),
          bytesSent: result.bytesSent ?? 0,
          bytesReceived: result.bytesReceived ?? 0,
          seconds,
        };
      } catch (error) {
        return failure("go", error, { epoch });
      }
    },
    connect: async ([address = ""]) => {
      try {
        return { event: "connected", address, peer: await swarm.node.connect(address) };
      } catch (error) {
        return failure("connect", error, { address });
      }
    },
    "dial-fresh": async ([address = ""]) => {
      try {
        const connection = await swarm.node.libp2p.dial(multiaddr(address), {
          force: true,
          signal: AbortSignal.timeout(5_000),
        });
        const remoteAddr = connection.remoteAddr.toString();
        await connection.close();
        return { event: "dialed", address, remoteAddr };
      } catch (error) {
        return failure("dial-fresh", error, { address });
      }
    },
    connections: () =>
      Promise.resolve({
        event: "connections",
        connections: swarm.node.libp2p.getConnections().map((connection) => ({
          peer: connection.remotePeer.toString(),
          remoteAddr: connection.remoteAddr.toString(),
          direction: connection.direction,
        })),
      }),
  };

  const input = createInterface({ input: process.stdin, crlfDelay: Infinity });
  input.on("line", (line) => {
    const [name = "", ...args] = line.trim().split(/\s+/);
    const command = commands[name];
    if (name === "") return;
    if (command === undefined) {
      emit(failure(name, new Error(`unknown command: ${line}`)));
      return;
    }
    void command(args).then(emit, (error: unknown) => {
      emit(failure(name, error));
    });
  });
  input.on("close", () => void shutdown());
  process.on("SIGTERM", () => void shutdown());
}

/** The parent's handle on a peer process: its events, and commands written to its stdin. */
export class PeerProcess {
  /** This file, to run as the child's script. */
  static readonly script = new URL(import.meta.url).pathname;
  readonly child: ChildProcess;
  readonly watch: JsonLineWatch;

  private constructor(child: ChildProcess) {
    this.child = child;
    this.watch = watchJsonLines(child);
  }

  /**
   * Starts a peer; `spawnNode` runs a Node script (default: a plain child process, or pass a netlab
   * host's `spawnNode`). Stdin must be piped: the peer exits when it closes.
   */
  static spawn(
    options: PeerProcessOptions,
    spawnNode: (script: string, args: string[], init: { stdio: StdioOptions }) => ChildProcess = (
      script,
      args,
      init,
    ) => spawn(process.execPath, [script, ...args], init),
  ): PeerProcess {
    return new PeerProcess(
      spawnNode(PeerProcess.script, [JSON.stringify(options)], { stdio: ["pipe", "pipe", "pipe"] }),
    );
  }

  /** The first event from index `from` on (default: any so far) that `accept` takes. */
  waitFor<T extends PeerEvent>(
    accept: (event: PeerEvent) => event is T,
    timeoutMs = 15_000,
    from = 0,
  ): Promise<T> {
    const lines = this.watch.lines;
    return this.watch.waitFor(
      (value): value is T => isPeerEvent(value) && accept(value) && lines.indexOf(value) >= from,
      timeoutMs,
    );
  }

  /** Writes a command and waits for the first event after it that `accept` takes. */
  command<T extends PeerEvent>(
    line: string,
    accept: (event: PeerEvent) => event is T,
    timeoutMs = 15_000,
  ): Promise<T> {
    const from = this.watch.lines.length;
    this.child.stdin?.write(`${line}\n`);
    return this.waitFor(accept, timeoutMs, from);
  }

  /** Ends the process (on SIGTERM it stops the swarm first and exits 0) and waits for it to exit. */
  stop(signal: NodeJS.Signals = "SIGTERM"): Promise<ChildOutcome> {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill(signal);
    return this.watch.exited;
  }
}

function isPeerEvent(value: unknown): value is PeerEvent {
  return (
    typeof value === "object" && value !== null && typeof (value as { event?: unknown }).event === "string"
  );
}

/** Event predicates for {@link PeerProcess.waitFor} and {@link PeerProcess.command}. */
export const on = {
  ready: (event: PeerEvent): event is Extract<PeerEvent, { event: "ready" }> => event.event === "ready",
  members:
    (count: number) =>
    (event: PeerEvent): event is Extract<PeerEvent, { event: "members" }> =>
      event.event === "members" && event.count >= count,
  addrs:
    (accept: (addrs: string[]) => boolean) =>
    (event: PeerEvent): event is Extract<PeerEvent, { event: "addrs" }> =>
      event.event === "addrs" && accept(event.addrs),
  /** The answer to one command: its own event or a failure of it. */
  answer:
    <K extends PeerEvent["event"]>(kind: K, command: string) =>
    (event: PeerEvent): event is Extract<PeerEvent, { event: K | "failed" }> =>
      event.event === kind || (event.event === "failed" && event.command === command),
};

if (import.meta.main) await main();
