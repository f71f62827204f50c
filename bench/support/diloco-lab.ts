/**
 * Training peers of the DiLoCo benches (bench/diloco-utilization.ts, bench/diloco-churn.ts) as
 * processes on netlab hosts: one `bench/support/diloco-peer.ts` each, with a fresh identity and a
 * pass from the bench's authority, driven by JSON lines.
 */
import { generateKeyPair, type ExperimentConfigInput } from "@barnraise/protocol";
import type { z } from "zod";
import { watchJsonLines, type Host, type JsonLineWatch } from "../../packages/netlab/src/index.ts";
import type { TestAuthority } from "../../packages/swarm/test/support/swarm-fixtures.ts";
import type { DilocoPeerCommand, DilocoPeerSpec } from "./diloco-peer.ts";
import { variantConfig, type BenchModel } from "./diloco-setup.ts";

const PEER_SCRIPT = new URL("./diloco-peer.ts", import.meta.url).pathname;
/** Where every peer listens on its host. */
export const PEER_PORT = 4001;
const INIT_SEED = 1234;
const DATA_SEED = 100;

export interface RunningPeer {
  readonly child: ReturnType<Host["spawnNode"]>;
  readonly watch: JsonLineWatch;
}

/** What a bench chooses for its peers; the rest of a `DilocoPeerSpec` is the same for all. */
export interface PeerOptions {
  readonly authority: TestAuthority;
  readonly config: ExperimentConfigInput;
  /** The link capacity each peer is told (payload bytes per second, both ways). */
  readonly bytesPerSecond: number;
  /** The swarm's size, which the trainer reports as the peers online. */
  readonly peers: number;
  readonly dataDir: string;
  readonly backend: string;
  readonly warmupRounds: number;
  readonly rounds: number;
  readonly churn?: boolean;
}

/** Starts peer `index` on `host`, dialling `bootstrap` first; it reads its own shuffle of the data. */
export function spawnPeer(host: Host, index: number, bootstrap: string[], options: PeerOptions): RunningPeer {
  const keys = generateKeyPair();
  const rate = options.bytesPerSecond;
  const spec: DilocoPeerSpec = {
    index,
    experimentId: options.authority.experimentId,
    secretKey: Buffer.from(keys.secretKey).toString("base64url"),
    authorityPublicKey: Buffer.from(options.authority.keyPair.publicKey).toString("base64url"),
    pass: options.authority.pass(keys, {
      username: `peer${index}`,
      role: "trainer",
      lifetimeMs: 6 * 3_600_000,
    }),
    listen: [`/ip4/${host.address}/tcp/${PEER_PORT}`],
    bootstrap,
    bandwidth: { uploadBytesPerSecond: rate, downloadBytesPerSecond: rate },
    config: options.config,
    peers: options.peers,
    dataDir: options.dataDir,
    backend: options.backend,
    initSeed: INIT_SEED,
    dataSeed: DATA_SEED,
    warmupRounds: options.warmupRounds,
    rounds: options.rounds,
    ...(options.churn === true ? { churn: true } : {}),
  };
  const child = host.spawnNode(PEER_SCRIPT, [JSON.stringify(spec)], { stdio: ["pipe", "pipe", "pipe"] });
  child.stdin?.on("error", () => undefined);
  return { child, watch: watchJsonLines(child) };
}

/** Sends `command` to a peer that is still running. */
export function send(peer: RunningPeer, command: DilocoPeerCommand): void {
  if (peer.child.exitCode !== null || peer.child.stdin?.writable !== true) return;
  peer.child.stdin.write(`${JSON.stringify(command)}\n`);
}

/** The peer's first line that fits `schema` (past ones included). */
export function waitLine<T extends z.ZodType>(
  peer: RunningPeer,
  schema: T,
  timeoutMs: number,
): Promise<z.infer<T>> {
  const isWanted = (value: unknown): value is z.infer<T> => schema.safeParse(value).success;
  return peer.watch.waitFor(isWanted, timeoutMs);
}

/** Tells every peer to stop and waits up to 10 s for them to exit. */
export async function stopAll(peers: readonly RunningPeer[]): Promise<void> {
  for (const peer of peers) send(peer, { cmd: "stop" });
  await Promise.race([
    Promise.all(peers.map((peer) => peer.watch.exited)),
    new Promise((resolve) => setTimeout(resolve, 10_000)),
  ]);
}

/** A numeric flag `--name` of at least `min`; throws a RangeError naming it otherwise. */
export function positive(name: string, text: string, min = 1): number {
  const value = Number(text);
  if (!(Number.isFinite(value) && value >= min))
    throw new RangeError(`--${name} must be ≥ ${min}, got ${text}`);
  return value;
}

/** The comma-separated `--variants`, each one of `known`. */
export function parseVariants<V extends string>(text: string, known: readonly V[]): V[] {
  return text.split(",").map((name) => {
    if (!(known as readonly string[]).includes(name)) {
      throw new RangeError(`--variants: unknown variant ${name} (${known.join(", ")})`);
    }
    return name as V;
  });
}

/**
 * The run of a lab variant: `dedloc` at the model's target batch (adaptive compression), or DiLoCo
 * in blockwise8 with rounds of H × T (`diloco-overlap`: the outer all-reduce overlapped).
 */
export function labConfig(
  variant: "dedloc" | "diloco" | "diloco-overlap",
  bench: BenchModel,
  h: number,
): ExperimentConfigInput {
  return variantConfig(variant === "dedloc" ? "dedloc" : "diloco-int8", {
    bench,
    h,
    learningRate: 1e-3,
    outerLearningRate: 0.7,
    outerMomentum: 0.9,
    overlap: variant === "diloco-overlap",
    averaging: { matchmakingTimeoutMs: 15_000, allreduceTimeoutMs: 60_000 },
  });
}
