/**
 * Many real swarms in one test process, spread over worker threads (swarm-worker.ts). A single
 * event loop carrying 64 libp2p nodes spends seconds between turns once they all gossip and
 * average, and every deadline then fires late; a few threads each carry a share, as separate
 * machines would. The host speaks to the swarms only through these requests.
 */
import type { ExperimentConfigInput } from "@barnraise/protocol";
import { Worker } from "node:worker_threads";
import type { GossipCounts } from "./gossip-counters.ts";
import type { TestAuthority } from "./swarm-fixtures.ts";

export interface WorkerData {
  experimentId: string;
  authorityPublicKey: Uint8Array;
  authoritySecretKey: Uint8Array;
  config: ExperimentConfigInput;
}

export type WorkerRequest = { id: number } & (
  | { op: "start"; count: number; bootstrap: string[] }
  | { op: "members" }
  | { op: "report"; epoch: number; weights: number[] }
  | { op: "records"; epoch: number }
  | { op: "plan"; epoch: number }
  | { op: "average"; epoch: number; vectors: Float32Array[]; weights: number[] }
  | { op: "hold"; states: Array<HeldState | null> }
  | { op: "catch-up"; take: boolean[] }
  | { op: "donors"; epoch: number }
  | { op: "served" }
  | { op: "progress"; epoch: number; samples: number }
  | { op: "gossip" }
  | { op: "control"; index: number; token: string }
  | { op: "refuses"; peerId: string; version: number }
  | { op: "stop" }
);

/** A training state a swarm serves: `size` parameters and one optimizer slot from `seed`. */
export interface HeldState {
  epoch: number;
  seed: number;
  size: number;
}

/** A swarm's progress gossip: the live records it holds, its publish period, its traffic so far. */
export interface GossipReply {
  swarmSize: number;
  periodMs: number;
  counts: GossipCounts;
}

/** A fingerprint of parameters, the same on every thread: their float32 values, in order. */
export function checksum(parameters: Float32Array): number {
  let sum = 0;
  for (const value of parameters) sum = (sum * 31 + Math.round(value * 1e6)) % 1_000_000_007;
  return sum;
}

/** What a swarm's state port brought: the epoch and a checksum of the parameters, or why not. */
export type CatchUpReply = { epoch: number; checksum: number; ms: number } | { error: string } | null;

export type AverageReply =
  { vector: Float32Array; rounds: number; groupSize: number; totalWeight: number } | { error: string };

export type WorkerResult =
  | Array<{ peerId: string; multiaddrs: string[] }>
  | number[]
  | AverageReply[]
  | CatchUpReply[]
  | GossipReply[]
  | { radices: number[] }
  | null;

export type WorkerReply = { id: number } & ({ result: WorkerResult } | { error: string; result?: undefined });

type Pending = { resolve: (value: unknown) => void; reject: (error: Error) => void };

class SwarmThread {
  readonly #worker: Worker;
  readonly #pending = new Map<number, Pending>();
  #next = 0;

  constructor(data: WorkerData) {
    this.#worker = new Worker(new URL("./swarm-worker.ts", import.meta.url), { workerData: data });
    this.#worker.on("message", (reply: WorkerReply) => {
      const pending = this.#pending.get(reply.id);
      this.#pending.delete(reply.id);
      if ("error" in reply) pending?.reject(new Error(reply.error));
      else pending?.resolve(reply.result);
    });
    this.#worker.on("error", (error: unknown) => {
      const failure = error instanceof Error ? error : new Error(String(error));
      for (const pending of this.#pending.values()) pending.reject(failure);
      this.#pending.clear();
    });
  }

  request<T>(request: DistributiveOmit<WorkerRequest, "id">): Promise<T> {
    const id = this.#next++;
    return new Promise<T>((resolve, reject) => {
      this.#pending.set(id, { resolve: resolve as (value: unknown) => void, reject });
      this.#worker.postMessage({ ...request, id });
    });
  }

  async terminate(): Promise<void> {
    await this.#worker.terminate();
  }
}

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

/** `count` swarms of `authority`'s experiment over `threads` worker threads, in peer order. */
export class ThreadedSwarms {
  readonly #threads: SwarmThread[];
  /** Swarms per thread, in order: swarm k lives on the thread whose range holds k. */
  readonly #sizes: number[];
  peerIds: string[] = [];

  private constructor(threads: SwarmThread[], sizes: number[]) {
    this.#threads = threads;
    this.#sizes = sizes;
  }

  /** Starts the swarms, the first one alone so that the others bootstrap from it. */
  static async start(
    authority: TestAuthority,
    config: ExperimentConfigInput,
    count: number,
    threadCount: number,
  ): Promise<ThreadedSwarms> {
    const data: WorkerData = {
      experimentId: authority.experimentId,
      authorityPublicKey: authority.keyPair.publicKey,
      authoritySecretKey: authority.keyPair.secretKey,
      config,
    };
    const threads = Array.from({ length: threadCount }, () => new SwarmThread(data));
    const sizes = threads.map((_, t) => Math.floor(count / threadCount) + (t < count % threadCount ? 1 : 0));
    const swarms = new ThreadedSwarms(threads, sizes);
    try {
      const [first, ...rest] = threads;
      if (first === undefined) throw new Error("need at least one thread");
      const seed = await first.request<Array<{ peerId: string; multiaddrs: string[] }>>({
        op: "start",
        count: 1,
        bootstrap: [],
      });
      const bootstrap = seed.flatMap((swarm) => swarm.multiaddrs);
      const started = await Promise.all([
        first.request<Array<{ peerId: string }>>({ op: "start", count: (sizes[0] ?? 1) - 1, bootstrap }),
        ...rest.map((thread, t) =>
          thread.request<Array<{ peerId: string }>>({ op: "start", count: sizes[t + 1] ?? 0, bootstrap }),
        ),
      ]);
      swarms.peerIds = [seed, ...started].flat().map((swarm) => swarm.peerId);
    } catch (error) {
      await swarms.stop();
      throw error;
    }
    return swarms;
  }

  /** Splits one value per swarm into one array per thread. */
  #split<T>(values: readonly T[]): T[][] {
    let offset = 0;
    return this.#sizes.map((size) => {
      const slice = values.slice(offset, offset + size);
      offset += size;
      return slice;
    });
  }

  async #all<T>(request: (thread: SwarmThread, t: number) => Promise<T[]>): Promise<T[]> {
    return (await Promise.all(this.#threads.map((thread, t) => request(thread, t)))).flat();
  }

  /** Each swarm's count of connected members. */
  members(): Promise<number[]> {
    return this.#all((thread) => thread.request<number[]>({ op: "members" }));
  }

  /** Each swarm reports `epoch` with its weight and publishes its record. */
  async report(epoch: number, weights: readonly number[]): Promise<void> {
    const parts = this.#split(weights);
    await Promise.all(
      this.#threads.map((thread, t) => thread.request({ op: "report", epoch, weights: parts[t] ?? [] })),
    );
  }

  /** How many other swarms' records at `epoch` each swarm holds. */
  records(epoch: number): Promise<number[]> {
    return this.#all((thread) => thread.request<number[]>({ op: "records", epoch }));
  }

  /** The grid the first swarm plans for `epoch`. */
  async radices(epoch: number): Promise<number[] | undefined> {
    const plan = await this.#threads[0]?.request<{ radices: number[] } | null>({ op: "plan", epoch });
    return plan?.radices;
  }

  /** Every swarm averages its vector of `epoch` at once. */
  average(
    epoch: number,
    vectors: readonly Float32Array[],
    weights: readonly number[],
  ): Promise<AverageReply[]> {
    const vectorParts = this.#split(vectors);
    const weightParts = this.#split(weights);
    return this.#all((thread, t) =>
      thread.request<AverageReply[]>({
        op: "average",
        epoch,
        vectors: vectorParts[t] ?? [],
        weights: weightParts[t] ?? [],
      }),
    );
  }

  /**
   * Swarms given a state serve it and report its epoch; the others (null) hold nothing.
   */
  async hold(states: ReadonlyArray<HeldState | null>): Promise<void> {
    const parts = this.#split(states);
    await Promise.all(
      this.#threads.map((thread, t) => thread.request({ op: "hold", states: parts[t] ?? [] })),
    );
  }

  /** How many state donors at or after `epoch` each swarm knows. */
  donors(epoch: number): Promise<number[]> {
    return this.#all((thread) => thread.request<number[]>({ op: "donors", epoch }));
  }

  /** The swarms marked in `take` all load newer state through their state port at once. */
  catchUp(take: readonly boolean[]): Promise<CatchUpReply[]> {
    const parts = this.#split(take);
    return this.#all((thread, t) => thread.request<CatchUpReply[]>({ op: "catch-up", take: parts[t] ?? [] }));
  }

  /** Every swarm reports progress (published at its own period, not at once). */
  async progress(epoch: number, samples: number): Promise<void> {
    await Promise.all(this.#threads.map((thread) => thread.request({ op: "progress", epoch, samples })));
  }

  /** Each swarm's progress gossip so far. */
  gossip(): Promise<GossipReply[]> {
    return this.#all((thread) => thread.request<GossipReply[]>({ op: "gossip" }));
  }

  /** The state chunks each swarm has served. */
  served(): Promise<number[]> {
    return this.#all((thread) => thread.request<number[]>({ op: "served" }));
  }

  /** Swarm `index` takes a run control token from the platform, as an aux does, and spreads it. */
  async offerControl(index: number, token: string): Promise<void> {
    let offset = 0;
    for (const [t, size] of this.#sizes.entries()) {
      if (index < offset + size) {
        await this.#threads[t]?.request({ op: "control", index: index - offset, token });
        return;
      }
      offset += size;
    }
    throw new Error(`no swarm ${index}`);
  }

  /**
   * For each swarm, whether it holds run control `version` or later, denies `peerId` and has no
   * connection to it (always false for `peerId`'s own swarm).
   */
  refuses(peerId: string, version: number): Promise<number[]> {
    return this.#all((thread) => thread.request<number[]>({ op: "refuses", peerId, version }));
  }

  async stop(): Promise<void> {
    await Promise.all(
      this.#threads.map(async (thread) => {
        await thread.request({ op: "stop" }).catch(() => undefined);
        await thread.terminate();
      }),
    );
  }
}
