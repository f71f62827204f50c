import { describe, expect, it } from "vitest";
import { allReduceMethod, type AllReduceRequest, refusalOf } from "../../src/averaging/allreduce-messages.ts";
import {
  AllReduceService,
  type AllReduceResult,
  type AllReduceRunOptions,
} from "../../src/averaging/butterfly-allreduce.ts";
import type { AllReduceGroup, GroupMember } from "../../src/averaging/partition.ts";
import { compressorFor } from "../../src/compression/index.ts";
import { isSwarmError } from "../../src/errors.ts";
import type { Rpc, RpcFrameStream, RpcHandler, RpcIncoming } from "../../src/rpc/rpc.ts";
import { MemoryRpcNetwork } from "../support/memory-rpc.ts";
import { seededRandom as mulberry32 } from "../support/seeded-random.ts";

// ---------- helpers ----------

function randomVector(random: () => number, length: number, scale = 1): Float32Array {
  return Float32Array.from({ length }, () => (random() * 2 - 1) * scale);
}

interface Hooks {
  /** Called after the n-th frame this peer wrote on a stream it opened. */
  afterCallWrite?: (n: number) => void;
  /** Called after the n-th frame this peer wrote on a stream it accepted. */
  afterRespondWrite?: (n: number) => void;
  onIncoming?: () => void;
}

/** Wraps an Rpc so a test can act deterministically after the n-th frame (kill, abort …). */
function hooked(rpc: Rpc, hooks: Hooks): Rpc {
  let callWrites = 0;
  let respondWrites = 0;
  const wrap = (stream: RpcFrameStream, after: () => void): RpcFrameStream => ({
    read: (options) => stream.read(options),
    write: async (frame, options) => {
      await stream.write(frame, options);
      after();
    },
    closeWrite: () => stream.closeWrite(),
    abort: (reason) => {
      stream.abort(reason);
    },
  });
  return {
    peerId: rpc.peerId,
    call: async (peer, method, head, options) => {
      const result = await rpc.call(peer, method, head, options);
      return { ...result, stream: wrap(result.stream, () => hooks.afterCallWrite?.(++callWrites)) };
    },
    request: (peer, method, head, options) => rpc.request(peer, method, head, options),
    handle: (method, handler) => {
      rpc.handle(method, (incoming) => {
        hooks.onIncoming?.();
        return handler({
          ...incoming,
          respond: async (head) =>
            wrap(await incoming.respond(head), () => hooks.afterRespondWrite?.(++respondWrites)),
        });
      });
    },
    unhandle: (method) => {
      rpc.unhandle(method);
    },
  };
}

/** An Rpc whose opened streams go through `wrap` (after `opening`, if given); the rest is `rpc`'s. */
function wrapCallStreams(
  rpc: Rpc,
  wrap: (stream: RpcFrameStream) => RpcFrameStream,
  opening?: () => Promise<unknown>,
): Rpc {
  return {
    peerId: rpc.peerId,
    call: async (peer, method, head, options) => {
      const result = await rpc.call(peer, method, head, options);
      await opening?.();
      return { ...result, stream: wrap(result.stream) };
    },
    request: (peer, method, head, options) => rpc.request(peer, method, head, options),
    handle: (method, handler) => {
      rpc.handle(method, handler);
    },
    unhandle: (method) => {
      rpc.unhandle(method);
    },
  };
}

/** Records in a new slot of `mostAhead` the most frames the stream had written ahead of those read. */
function countAhead(stream: RpcFrameStream, mostAhead: number[]): RpcFrameStream {
  const slot = mostAhead.push(0) - 1;
  let ahead = 0;
  return {
    read: async (options) => {
      const frame = await stream.read(options);
      if (frame !== null) ahead--;
      return frame;
    },
    write: async (frame, options) => {
      ahead++;
      mostAhead[slot] = Math.max(mostAhead[slot] ?? 0, ahead);
      await stream.write(frame, options);
    },
    closeWrite: () => stream.closeWrite(),
    abort: (reason) => {
      stream.abort(reason);
    },
  };
}

/** Delivers each written frame `ms` later, in order, as a link with latency would; writes return at once. */
function delayWrites(stream: RpcFrameStream, ms: number): RpcFrameStream {
  let line = Promise.resolve();
  return {
    read: (options) => stream.read(options),
    write: (frame, options) => {
      const due = performance.now() + ms;
      line = line.then(async () => {
        await new Promise((resolve) => setTimeout(resolve, due - performance.now()));
        await stream.write(frame, options);
      });
      return Promise.resolve();
    },
    closeWrite: () => line.then(() => stream.closeWrite()),
    abort: (reason) => {
      stream.abort(reason);
    },
  };
}

interface Swarm {
  network: MemoryRpcNetwork;
  services: Map<string, AllReduceService>;
}

function swarm(
  members: readonly GroupMember[],
  options: { hooks?: Record<string, Hooks>; sessionWaitMs?: number; unstarted?: string[] } = {},
): Swarm {
  const network = new MemoryRpcNetwork();
  const services = new Map<string, AllReduceService>();
  for (const member of members) {
    const memory = network.add(member.peerId, member.mode === "aux" ? "aux" : "trainer");
    const hooks = options.hooks?.[member.peerId];
    const rpc = hooks === undefined ? memory : hooked(memory, hooks);
    const service = new AllReduceService({
      rpc,
      ...(options.sessionWaitMs === undefined ? {} : { sessionWaitMs: options.sessionWaitMs }),
    });
    if (!(options.unstarted ?? []).includes(member.peerId)) service.start();
    services.set(member.peerId, service);
  }
  return { network, services };
}

function makeGroup(groupId: string, members: readonly GroupMember[]): AllReduceGroup {
  const reducers = members.filter((member) => member.mode !== "client").length;
  return {
    groupId,
    members,
    fractions: members.map((member) => (member.mode === "client" ? 0 : 1 / reducers)),
  };
}

type Common = Omit<AllReduceRunOptions, "group" | "vector" | "weight">;

function runAll(
  { services }: Swarm,
  group: AllReduceGroup,
  vectors: ReadonlyMap<string, Float32Array>,
  common: Common,
  only?: readonly string[],
): Map<string, Promise<AllReduceResult>> {
  const runs = new Map<string, Promise<AllReduceResult>>();
  for (const member of group.members) {
    if (only !== undefined && !only.includes(member.peerId)) continue;
    const service = must(services.get(member.peerId));
    runs.set(
      member.peerId,
      service.run({ ...common, group, vector: must(vectors.get(member.peerId)), weight: member.weight }),
    );
  }
  return runs;
}

/** The float64 weighted mean over the given members. */
function weightedMean(
  members: readonly GroupMember[],
  vectors: ReadonlyMap<string, Float32Array>,
  length: number,
): Float64Array {
  const mean = new Float64Array(length);
  let total = 0;
  for (const member of members) {
    if (member.mode === "aux" || member.weight === 0) continue;
    const vector = must(vectors.get(member.peerId));
    for (let i = 0; i < length; i++) mean[i] = (mean[i] ?? 0) + member.weight * (vector[i] ?? 0);
    total += member.weight;
  }
  for (let i = 0; i < length; i++) mean[i] = (mean[i] ?? 0) / total;
  return mean;
}

function maxError(actual: Float32Array, expected: Float64Array): number {
  expect(actual.length).toBe(expected.length);
  let worst = 0;
  for (let i = 0; i < actual.length; i++)
    worst = Math.max(worst, Math.abs((actual[i] ?? 0) - (expected[i] ?? 0)));
  return worst;
}

function must<T>(value: T | undefined): T {
  if (value === undefined) throw new Error("missing test value");
  return value;
}

function bytesOf(vector: Float32Array): Uint8Array {
  return new Uint8Array(vector.buffer, vector.byteOffset, vector.byteLength);
}

function expectBitIdentical(results: readonly AllReduceResult[]): void {
  const first = bytesOf(must(results[0]).vector);
  for (const result of results.slice(1)) expect(Buffer.compare(bytesOf(result.vector), first)).toBe(0);
}

function vectorsFor(
  members: readonly GroupMember[],
  length: number,
  seed: number,
): Map<string, Float32Array> {
  const random = mulberry32(seed);
  return new Map(members.map((member) => [member.peerId, randomVector(random, length, 1 + 3 * random())]));
}

const base: Common = {
  partCounts: [],
  compression: { method: "none" },
  chunkSizeBytes: 1024,
  timeoutMs: 20_000,
};

// ---------- tests ----------

/**
 * An all-reduce service per member on one memory network; the victim's incoming calls go through
 * `handleAs` (a frozen process: it takes calls and never answers, or stops mid-stream).
 */
/**
 * One round of four members with parts of 1,000 elements, 64-byte chunks and a 300 ms sender
 * deadline, in which `victim` is frozen: the others' outcomes once they settle. Then the victim's
 * own run is cancelled and `thaw` rejected, so that it settles too.
 */
async function roundWithFrozenVictim(
  services: readonly AllReduceService[],
  members: readonly GroupMember[],
  victim: string,
  groupName: string,
  seed: number,
  thaw: PromiseWithResolvers<never>,
): Promise<PromiseSettledResult<AllReduceResult>[]> {
  const group = makeGroup(groupName, members);
  const vectors = vectorsFor(members, 4000, seed);
  const stopVictim = new AbortController();
  const runs = members.map((member, k) =>
    must(services[k]).run({
      ...base,
      chunkSizeBytes: 64,
      partCounts: [1000, 1000, 1000, 1000],
      timeoutMs: 60_000,
      senderTimeoutMs: 300,
      group,
      vector: must(vectors.get(member.peerId)),
      weight: member.weight,
      ...(member.peerId === victim ? { signal: stopVictim.signal } : {}),
    }),
  );
  const victimIndex = members.findIndex((member) => member.peerId === victim);
  const victimRun = runs.splice(victimIndex, 1)[0]?.catch(() => undefined);
  const outcomes = await Promise.allSettled(runs);
  stopVictim.abort();
  thaw.reject(new Error("thawed"));
  await victimRun;
  return outcomes;
}

function servicesWithVictim(
  members: readonly GroupMember[],
  victim: string,
  handleAs: (incoming: RpcIncoming<unknown, unknown>, handler: RpcHandler<unknown, unknown>) => Promise<void>,
  /** What the victim writes on the streams it opens (as a sender) goes through this. */
  sendAs: (stream: RpcFrameStream) => RpcFrameStream = (stream) => stream,
): AllReduceService[] {
  const network = new MemoryRpcNetwork();
  return members.map((member) => {
    const memory = network.add(member.peerId);
    const rpc: Rpc =
      member.peerId !== victim
        ? memory
        : {
            peerId: memory.peerId,
            call: async (peer, method, head, options) => {
              const opened = await memory.call(peer, method, head, options);
              return { ...opened, stream: sendAs(opened.stream) };
            },
            request: (peer, method, head, options) => memory.request(peer, method, head, options),
            handle: (method, handler) => {
              memory.handle(method, (incoming) =>
                handleAs(incoming as RpcIncoming<unknown, unknown>, handler as RpcHandler<unknown, unknown>),
              );
            },
            unhandle: (method) => {
              memory.unhandle(method);
            },
          };
    const service = new AllReduceService({ rpc });
    service.start();
    return service;
  });
}

describe("butterfly all-reduce", () => {
  it("8 peers with random weights and uneven parts end with the bit-identical weighted mean", async () => {
    const random = mulberry32(1);
    const members: GroupMember[] = Array.from({ length: 8 }, (_, i) => ({
      peerId: `p${i}`,
      mode: "node",
      weight: 1 + Math.floor(random() * 100),
    }));
    const length = 5003;
    const partCounts = [900, 1200, 0, 450, 1, 1000, 700, 752];
    const net = swarm(members);
    const vectors = vectorsFor(members, length, 2);
    const copies = new Map([...vectors].map(([peer, vector]) => [peer, vector.slice()]));
    const results = await Promise.all(
      runAll(net, makeGroup("round-1", members), vectors, { ...base, partCounts }).values(),
    );

    const expected = weightedMean(members, vectors, length);
    const totalWeight = members.reduce((sum, member) => sum + member.weight, 0);
    for (const [index, result] of results.entries()) {
      expect(maxError(result.vector, expected)).toBeLessThan(1e-6);
      expect(result.totalWeight).toBe(totalWeight);
      expect(result.excluded).toEqual([]);
      expect(result.bytesAggregated).toBe(7 * must(partCounts[index]) * 4);
    }
    expectBitIdentical(results);
    for (const [peer, vector] of vectors) expect(vector).toEqual(copies.get(peer));
    // Every byte sent was received by someone.
    const sent = results.reduce((sum, result) => sum + result.bytesSent, 0);
    const received = results.reduce((sum, result) => sum + result.bytesReceived, 0);
    expect(sent).toBe(received);
    expect(sent).toBeGreaterThan(2 * 7 * length * 4 * (7 / 8));
  });

  it.each([
    ["blockwise8", 1 / 127],
    ["fp16", 1 / 1024],
  ] as const)(
    "with %s every member gets the same bytes, within the codec's error of the mean",
    async (method, relative) => {
      const members: GroupMember[] = Array.from({ length: 5 }, (_, i) => ({
        peerId: `q${i}`,
        mode: "node",
        weight: 10 + i,
      }));
      const length = 9000;
      const net = swarm(members);
      const vectors = vectorsFor(members, length, 3);
      const results = await Promise.all(
        runAll(net, makeGroup(`codec-${method}`, members), vectors, {
          ...base,
          compression: { method },
          chunkSizeBytes: 2048,
          partCounts: [2000, 2500, 1500, 1500, 1500],
        }).values(),
      );
      expectBitIdentical(results);
      const expected = weightedMean(members, vectors, length);
      const maxAbs = Math.max(...[...vectors.values()].map((vector) => Math.max(...vector.map(Math.abs))));
      const error = maxError(must(results[0]).vector, expected);
      // One rounding on the way up (each input) and one on the way back (the mean).
      expect(error).toBeLessThan(2 * relative * maxAbs);
      expect(error).toBeGreaterThan(0);
    },
  );

  it("serves a client-mode member (dials out only), an aux reducer and a weight-0 node", async () => {
    const members: GroupMember[] = [
      { peerId: "n0", mode: "node", weight: 5 },
      { peerId: "n1", mode: "node", weight: 7 },
      { peerId: "c", mode: "client", weight: 3 },
      { peerId: "aux", mode: "aux", weight: 0 },
      { peerId: "idle", mode: "node", weight: 0 },
    ];
    const length = 3000;
    // The client's service is never started: any call to it would fail the round.
    const net = swarm(members, { unstarted: ["c"] });
    const vectors = vectorsFor(members, length, 4);
    vectors.set("idle", new Float32Array(length).fill(1e6));
    const runs = runAll(net, makeGroup("mixed", members), vectors, {
      ...base,
      partCounts: [1000, 1000, 0, 1000, 0],
    });
    const [n0, n1, client, aux, idle] = await Promise.all(runs.values());
    const expected = weightedMean(members, vectors, length);
    for (const result of [must(n0), must(n1), must(client), must(idle)]) {
      expect(maxError(result.vector, expected)).toBeLessThan(1e-6);
      expect(result.totalWeight).toBe(15);
    }
    expectBitIdentical([must(n0), must(n1), must(client), must(idle)]);
    expect(must(aux).vector).toHaveLength(0);
    expect(must(aux).bytesAggregated).toBe(3 * 1000 * 4);
    expect(must(aux).bytesReceived).toBeGreaterThan(0);
    expect(must(idle).bytesSent).toBe(0);
    expect(must(client).bytesAggregated).toBe(0);
  });

  it("excludes a sender killed mid-round and renormalizes its weight away", async () => {
    const members: GroupMember[] = Array.from({ length: 6 }, (_, i) => ({
      peerId: `s${i}`,
      mode: "node",
      weight: 2 + i,
    }));
    const victim = "s5";
    const length = 2500;
    const partCounts = [500, 500, 500, 500, 500, 0];
    const net = swarm(members, {
      hooks: {
        [victim]: {
          afterCallWrite: (n) => {
            if (n === 7) net.network.kill(victim);
          },
        },
      },
    });
    const vectors = vectorsFor(members, length, 5);
    const runs = runAll(net, makeGroup("kill-sender", members), vectors, {
      ...base,
      chunkSizeBytes: 200,
      partCounts,
    });
    await expect(runs.get(victim)).rejects.toMatchObject({ code: "ALLREDUCE_FAILED" });
    const survivors = await Promise.all([...runs].filter(([peer]) => peer !== victim).map(([, run]) => run));
    expectBitIdentical(survivors);

    const withVictim = weightedMean(members, vectors, length);
    const without = weightedMean(members.slice(0, 5), vectors, length);
    const vector = must(survivors[0]).vector;
    let includedSomewhere = false;
    for (let i = 0; i < length; i++) {
      const near = (x: number) => Math.abs((vector[i] ?? 0) - x) < 1e-6;
      expect(near(without[i] ?? 0) || near(withVictim[i] ?? 0)).toBe(true);
      if (!near(without[i] ?? 0)) includedSomewhere = true;
    }
    expect(includedSomewhere).toBe(true);
    // The last chunk of every part was reduced after the victim died.
    for (let part = 0; part < 5; part++) {
      const lastChunk = vector.subarray(part * 500 + 450, part * 500 + 500);
      expect(maxError(lastChunk, without.subarray(part * 500 + 450, part * 500 + 500))).toBeLessThan(1e-6);
    }
    for (const result of survivors) {
      expect(result.excluded).toEqual([victim]);
      expect(result.totalWeight).toBe(2 + 3 + 4 + 5 + 6);
    }
  });

  it("fails the round a little after the sender deadline when a reducer stops answering (no result, no error), not at the round's deadline", async () => {
    const members: GroupMember[] = Array.from({ length: 4 }, (_, i) => ({
      peerId: `z${i}`,
      mode: "node",
      weight: 1 + i,
    }));
    const victim = "z3";
    let frozen = false;
    let resultsWritten = 0;
    // Pending until the test ends; then the frozen process's calls fail, so its own run settles.
    const thaw = Promise.withResolvers<never>();
    thaw.promise.catch(() => undefined);
    const never = thaw.promise;
    // Its streams stay open, but after its 3rd result its reducer neither reads nor writes again
    // (a hung reduction; a frozen process also stops sending, which its reducers catch first). It
    // goes on sending its own chunks, so the others' reducers keep it.
    const freezing = (stream: RpcFrameStream): RpcFrameStream => ({
      read: (options) => (frozen ? never : stream.read(options)),
      write: async (frame, options) => {
        if (frozen) return never;
        await stream.write(frame, options);
        if (++resultsWritten === 3) frozen = true;
      },
      closeWrite: () => (frozen ? never : stream.closeWrite()),
      abort: (reason) => {
        if (!frozen) stream.abort(reason);
      },
    });
    const services = servicesWithVictim(members, victim, (incoming, handler) =>
      handler({ ...incoming, respond: async (head) => freezing(await incoming.respond(head)) }),
    );
    const outcomes = await roundWithFrozenVictim(services, members, victim, "frozen-reducer", 21, thaw);
    // Every other member misses the frozen reducer's part: each fails with the result deadline's
    // reason, long before the round's 60 s deadline would have ended it.
    for (const outcome of outcomes) {
      expect(outcome.status).toBe("rejected");
      const error = outcome.status === "rejected" ? (outcome.reason as Error) : undefined;
      expect(error).toMatchObject({ code: "ALLREDUCE_FAILED" });
      expect(error?.message).toContain("the reducer is frozen or cut off");
      expect(error?.message).not.toContain("did not finish within");
    }
    expect(resultsWritten).toBe(3);
  });

  it("keeps a reducer whose results come late while its own chunks keep coming (one slow link, one queue)", async () => {
    const members: GroupMember[] = Array.from({ length: 4 }, (_, i) => ({
      peerId: `l${i}`,
      mode: "node",
      weight: 1 + i,
    }));
    const slow = "l3";
    const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
    // The slow member's link: its chunks leave one every 50 ms, and its first result waits 2.8 s
    // behind them, longer than the result deadline (300 ms sender deadline + 2 s).
    const paced = (stream: RpcFrameStream, delayMs: (n: number) => number): RpcFrameStream => {
      let written = 0;
      return {
        read: (options) => stream.read(options),
        write: async (frame, options) => {
          await pause(delayMs(written++));
          await stream.write(frame, options);
        },
        closeWrite: () => stream.closeWrite(),
        abort: (reason) => {
          stream.abort(reason);
        },
      };
    };
    const services = servicesWithVictim(
      members,
      slow,
      (incoming, handler) =>
        handler({
          ...incoming,
          respond: async (head) => paced(await incoming.respond(head), (n) => (n === 0 ? 2_800 : 0)),
        }),
      (stream) => paced(stream, () => 50),
    );
    const group = makeGroup("slow-link", members);
    const length = 4000;
    const vectors = vectorsFor(members, length, 23);
    const results = await Promise.all(
      members.map((member, k) =>
        must(services[k]).run({
          ...base,
          chunkSizeBytes: 64,
          partCounts: [1000, 1000, 1000, 1000],
          timeoutMs: 60_000,
          senderTimeoutMs: 300,
          group,
          vector: must(vectors.get(member.peerId)),
          weight: member.weight,
        }),
      ),
    );
    expectBitIdentical(results);
    expect(maxError(must(results[0]).vector, weightedMean(members, vectors, length))).toBeLessThan(1e-6);
    for (const result of results) expect(result.excluded).toEqual([]);
  });

  it("fails the round a little after the sender deadline when a reducer froze before answering the opening request", async () => {
    const members: GroupMember[] = Array.from({ length: 4 }, (_, i) => ({
      peerId: `f${i}`,
      mode: "node",
      weight: 1 + i,
    }));
    const victim = "f2";
    // Pending until the test ends: the frozen process takes its calls and never answers them.
    const thaw = Promise.withResolvers<never>();
    thaw.promise.catch(() => undefined);
    const services = servicesWithVictim(members, victim, () => thaw.promise);
    const outcomes = await roundWithFrozenVictim(
      services,
      members,
      victim,
      "frozen-before-answering",
      22,
      thaw,
    );
    for (const outcome of outcomes) {
      expect(outcome.status).toBe("rejected");
      const error = outcome.status === "rejected" ? (outcome.reason as Error) : undefined;
      expect(error).toMatchObject({ code: "ALLREDUCE_FAILED" });
      // The opening request waited the sender deadline plus the result slack, not the round's 60 s.
      expect(error?.message).toContain(`part 2 from ${victim} failed: no response within 2300 ms`);
    }
  });

  it("fails the members that miss a killed reducer's part, leaves their inputs alone, and a retry succeeds", async () => {
    const members: GroupMember[] = Array.from({ length: 5 }, (_, i) => ({
      peerId: `r${i}`,
      mode: "node",
      weight: 1 + i,
    }));
    const victim = "r2";
    const length = 2000;
    const net = swarm(members, {
      hooks: {
        [victim]: {
          afterRespondWrite: (n) => {
            if (n === 3) net.network.kill(victim);
          },
        },
      },
    });
    const vectors = vectorsFor(members, length, 6);
    const copies = new Map([...vectors].map(([peer, vector]) => [peer, vector.slice()]));
    const common = { ...base, chunkSizeBytes: 400, partCounts: [400, 400, 400, 400, 400] };
    const runs = runAll(net, makeGroup("kill-reducer", members), vectors, common);
    const outcomes = await Promise.allSettled(runs.values());
    for (const outcome of outcomes) {
      expect(outcome.status).toBe("rejected");
      if (outcome.status === "rejected") expect(outcome.reason).toMatchObject({ code: "ALLREDUCE_FAILED" });
    }
    for (const [peer, vector] of vectors) expect(vector).toEqual(copies.get(peer));

    const survivors = members.filter((member) => member.peerId !== victim);
    const retry = makeGroup("kill-reducer-retry", survivors);
    const results = await Promise.all(
      runAll(net, retry, vectors, { ...common, partCounts: [500, 500, 500, 500] }).values(),
    );
    expectBitIdentical(results);
    expect(maxError(must(results[0]).vector, weightedMean(survivors, vectors, length))).toBeLessThan(1e-6);
    expect(must(results[0]).excluded).toEqual([]);
  });

  it("refuses hostile heads and frames with typed errors while the honest members finish", async () => {
    const honest: GroupMember[] = Array.from({ length: 5 }, (_, i) => ({
      peerId: `h${i}`,
      mode: "node",
      weight: 3 + i,
    }));
    const members: GroupMember[] = [...honest, { peerId: "evil", mode: "node", weight: 9 }];
    const length = 500;
    const partCounts = [100, 100, 100, 100, 100, 0];
    const net = swarm(members, { sessionWaitMs: 30 });
    const evil = must(net.network.get("evil"));
    const outsider = net.network.add("outsider");
    const group = makeGroup("hostile", members);
    const vectors = vectorsFor(members, length, 7);
    const runs = runAll(
      net,
      group,
      vectors,
      { ...base, chunkSizeBytes: 200, partCounts },
      honest.map((m) => m.peerId),
    );

    const head = (partIndex: number, change: Partial<AllReduceRequest> = {}): AllReduceRequest => ({
      groupId: "hostile",
      senderIndex: 5,
      partIndex,
      weight: 9,
      partLength: 100,
      chunkElements: 50,
      ...change,
    });
    const refused = (code: string): unknown =>
      expect.objectContaining({ code: "REMOTE_ERROR", remoteCode: code });
    await expect(evil.call("h0", allReduceMethod, head(0, { senderIndex: 1 }))).rejects.toEqual(
      refused("UNAUTHORIZED_PEER"),
    );
    await expect(outsider.call("h0", allReduceMethod, head(0))).rejects.toEqual(refused("UNAUTHORIZED_PEER"));
    await expect(outsider.call("h0", allReduceMethod, head(0))).rejects.toThrow(/outsider is not a member/);
    await expect(evil.call("h0", allReduceMethod, head(1))).rejects.toEqual(refused("MALFORMED_MESSAGE"));
    await expect(evil.call("h0", allReduceMethod, head(0, { partLength: 99 }))).rejects.toEqual(
      refused("MALFORMED_MESSAGE"),
    );
    await expect(evil.call("h0", allReduceMethod, head(0, { chunkElements: 10 }))).rejects.toEqual(
      refused("MALFORMED_MESSAGE"),
    );
    await expect(evil.call("h0", allReduceMethod, head(0, { weight: 0 }))).rejects.toEqual(
      refused("MALFORMED_MESSAGE"),
    );
    await expect(evil.call("h0", allReduceMethod, head(0, { weight: -1 }))).rejects.toMatchObject({
      code: "MALFORMED_MESSAGE",
    });
    await expect(evil.call("h0", allReduceMethod, head(0, { groupId: "nope" }))).rejects.toThrow(
      /did not start here/,
    );

    const none = compressorFor("none", 50);
    const frame = (index: number, payload: Uint8Array) => {
      const bytes = new Uint8Array(4 + payload.length);
      new DataView(bytes.buffer).setUint32(0, index, true);
      bytes.set(payload, 4);
      return bytes;
    };
    const withNaN = new Float32Array(50);
    withNaN[17] = Number.NaN;
    // A wrong index, a payload no codec reads, NaN, an oversized payload, one of the wrong length:
    // each reducer refuses the sender and tells it why (its refusal frame), then closes its end.
    const attacks: Array<[string, Uint8Array, string]> = [
      ["h0", frame(1, none.compress(new Float32Array(50))), "malformed"],
      ["h1", frame(0, new Uint8Array([1, 2, 3, 4, 5, 6, 7])), "malformed"],
      ["h2", frame(0, none.compress(withNaN)), "non-finite"],
      ["h3", frame(0, new Uint8Array(50 * 4 + 5000)), "malformed"],
      ["h4", frame(0, compressorFor("none", 51).compress(new Float32Array(51))), "malformed"],
    ];
    for (const [index, [reducer, bytes, reason]] of attacks.entries()) {
      const { stream } = await evil.call(reducer, allReduceMethod, head(index));
      if (reducer === "h0") {
        await expect(evil.call("h0", allReduceMethod, head(0))).rejects.toEqual(refused("MALFORMED_MESSAGE"));
      }
      await stream.write(bytes);
      expect(refusalOf((await stream.read()) ?? new Uint8Array())).toBe(reason);
      expect(await stream.read()).toBeNull();
      stream.abort(new Error("refused"));
    }
    // Excluded is final: a new stream from the same member is told it was refused, and why.
    const again = await evil.call("h1", allReduceMethod, head(1));
    expect(refusalOf((await again.stream.read()) ?? new Uint8Array())).toBe("malformed");

    const results = await Promise.all(runs.values());
    expectBitIdentical(results);
    expect(maxError(must(results[0]).vector, weightedMean(honest, vectors, length))).toBeLessThan(1e-6);
    for (const result of results) {
      expect(result.excluded).toEqual(["evil"]);
      expect(result.totalWeight).toBe(3 + 4 + 5 + 6 + 7);
    }
    // The round is over: its group id is refused at once.
    await expect(evil.call("h0", allReduceMethod, head(0))).rejects.toThrow(/hostile is over/);
  });

  it("tells a sender it dropped for silence that it was refused for a timeout, and finishes without it", async () => {
    const honest: GroupMember[] = Array.from({ length: 3 }, (_, i) => ({
      peerId: `h${i}`,
      mode: "node",
      weight: 1 + i,
    }));
    const members: GroupMember[] = [...honest, { peerId: "mute", mode: "node", weight: 5 }];
    const length = 300;
    const net = swarm(members);
    const mute = must(net.network.get("mute"));
    const group = makeGroup("silent", members);
    const vectors = vectorsFor(members, length, 9);
    const runs = runAll(
      net,
      group,
      vectors,
      { ...base, chunkSizeBytes: 200, partCounts: [100, 100, 100, 0], senderTimeoutMs: 200 },
      honest.map((m) => m.peerId),
    );
    // The mute member opens its stream to h0 and never sends a chunk.
    const { stream } = await mute.call("h0", allReduceMethod, {
      groupId: "silent",
      senderIndex: 3,
      partIndex: 0,
      weight: 5,
      partLength: 100,
      chunkElements: 50,
    });
    expect(refusalOf((await stream.read()) ?? new Uint8Array())).toBe("timeout");
    expect(await stream.read()).toBeNull();
    stream.abort(new Error("refused"));

    const results = await Promise.all(runs.values());
    expectBitIdentical(results);
    expect(maxError(must(results[0]).vector, weightedMean(honest, vectors, length))).toBeLessThan(1e-6);
    for (const result of results) expect(result.exclusions).toEqual([{ peer: "mute", reason: "timeout" }]);
  });

  it.each([
    [
      "a wrong chunk index",
      (frame: Uint8Array) => {
        new DataView(frame.buffer).setUint32(0, 1, true);
      },
    ],
    [
      "a non-finite total weight",
      (frame: Uint8Array) => {
        new DataView(frame.buffer).setFloat64(4, Number.NaN, true);
      },
    ],
    ["a truncated payload", (frame: Uint8Array) => frame.subarray(0, frame.length - 1)],
    [
      "non-finite values",
      (frame: Uint8Array) => {
        new DataView(frame.buffer).setFloat32(frame.length - 4, Infinity, true);
      },
    ],
  ])(
    "fails the round when a reducer sends %s",
    async (_, spoil: (frame: Uint8Array) => unknown) => {
      const members: GroupMember[] = Array.from({ length: 3 }, (_, i) => ({
        peerId: `v${i}`,
        mode: "node",
        weight: 1 + i,
      }));
      const net = swarm(members, { unstarted: ["v2"] });
      // v2 answers like a reducer but spoils its first result frame.
      must(net.network.get("v2")).handle(allReduceMethod, async (incoming) => {
        const stream = await incoming.respond({ chunkCount: 1 });
        const payload = compressorFor("none", 10).compress(new Float32Array(10).fill(1));
        const frame = new Uint8Array(12 + 1 + payload.length);
        new DataView(frame.buffer).setFloat64(4, 3, true);
        frame[12] = 0b111;
        frame.set(payload, 13);
        const spoilt = spoil(frame);
        await stream.write(spoilt instanceof Uint8Array ? spoilt : frame);
        await stream.closeWrite();
      });
      const vectors = vectorsFor(members, 30, 10);
      const runs = runAll(
        net,
        makeGroup("bad-results", members),
        vectors,
        // v2 never sends to the others: they stop waiting for it because their own exchange with it
        // failed, not because of this (far longer) sender timeout.
        { ...base, partCounts: [10, 10, 10], timeoutMs: 120_000, senderTimeoutMs: 60_000 },
        ["v0", "v1"],
      );
      for (const run of runs.values()) {
        const error: unknown = await run.catch((caught: unknown) => caught);
        expect(error).toMatchObject({ code: "ALLREDUCE_FAILED", peer: "v2" });
        expect(isSwarmError(error) && isSwarmError(error.cause, "MALFORMED_MESSAGE")).toBe(true);
      }
    },
    10_000,
  );

  it("pipelines many tiny chunks with backpressure, and streams that arrive early wait for the round", async () => {
    const members: GroupMember[] = Array.from({ length: 6 }, (_, i) => ({
      peerId: `t${i}`,
      mode: "node",
      weight: 1 + (i % 3),
    }));
    let arrivedEarly = 0;
    let lateStarted = false;
    const net = swarm(members, {
      hooks: {
        t0: {
          onIncoming: () => {
            if (!lateStarted) arrivedEarly++;
          },
        },
      },
    });
    const length = 601;
    const vectors = vectorsFor(members, length, 8);
    const group = makeGroup("tiny", members);
    const common = { ...base, chunkSizeBytes: 8, partCounts: [101, 100, 100, 100, 100, 100] };
    const early = runAll(
      net,
      group,
      vectors,
      common,
      members.slice(1).map((m) => m.peerId),
    );
    for (let i = 0; i < 3; i++) await new Promise((resolve) => setImmediate(resolve));
    lateStarted = true;
    const late = runAll(net, group, vectors, common, ["t0"]);
    expect(must(net.services.get("t0")).activeRounds()).toBe(1);
    const results = await Promise.all([...late.values(), ...early.values()]);
    expect(must(net.services.get("t0")).activeRounds()).toBe(0);
    expect(arrivedEarly).toBe(5);
    expectBitIdentical(results);
    expect(maxError(must(results[0]).vector, weightedMean(members, vectors, length))).toBeLessThan(1e-6);
  });

  it("keeps at most chunksInFlight chunks of each stream ahead of the results read back", async () => {
    const members: GroupMember[] = Array.from({ length: 3 }, (_, i) => ({
      peerId: `w${i}`,
      mode: "node",
      weight: 1 + i,
    }));
    const length = 300;
    const vectors = vectorsFor(members, length, 12);
    for (const chunksInFlight of [1, 3]) {
      const network = new MemoryRpcNetwork();
      /** Per stream a sender opened: chunks written minus results read, at its highest. */
      const mostAhead: number[] = [];
      const services = members.map((member) => {
        const rpc = network.add(member.peerId);
        const counting = wrapCallStreams(rpc, (stream) => countAhead(stream, mostAhead));
        const service = new AllReduceService({ rpc: counting });
        service.start();
        return service;
      });
      const group = makeGroup(`window-${chunksInFlight}`, members);
      const results = await Promise.all(
        members.map((member, k) =>
          must(services[k]).run({
            ...base,
            chunkSizeBytes: 8,
            chunksInFlight,
            partCounts: [100, 100, 100],
            group,
            vector: must(vectors.get(member.peerId)),
            weight: member.weight,
          }),
        ),
      );
      expectBitIdentical(results);
      expect(maxError(must(results[0]).vector, weightedMean(members, vectors, length))).toBeLessThan(1e-6);
      expect(mostAhead).toHaveLength(members.length * (members.length - 1));
      expect(Math.max(...mostAhead)).toBe(chunksInFlight);
      for (const result of results) expect(result.largestWindow).toBe(chunksInFlight);
    }
  });

  it("grows each stream's window by its bandwidth-delay product on a link with latency, up to the cap", async () => {
    const members: GroupMember[] = [
      { peerId: "lat0", mode: "node", weight: 1 },
      { peerId: "lat1", mode: "node", weight: 3 },
    ];
    const length = 1600; // 400 chunks of 2 values per part
    const vectors = vectorsFor(members, length, 13);
    const network = new MemoryRpcNetwork();
    const ONE_WAY_MS = 10;
    /** Per stream a sender opened: chunks written minus results read, at its highest. */
    const mostAhead: number[] = [];
    const services = members.map((member) => {
      const rpc = network.add(member.peerId);
      // The sender's chunks reach the reducer ONE_WAY_MS after they are written, in order; the
      // results come straight back: a round trip of about ONE_WAY_MS with ample bandwidth.
      const delayed = wrapCallStreams(
        rpc,
        (stream) => countAhead(delayWrites(stream, ONE_WAY_MS), mostAhead),
        // The request and its answer take a round trip too.
        () => new Promise((resolve) => setTimeout(resolve, ONE_WAY_MS)),
      );
      const service = new AllReduceService({ rpc: delayed });
      service.start();
      return service;
    });
    const group = makeGroup("latency", members);
    const results = await Promise.all(
      members.map((member, k) =>
        must(services[k]).run({
          ...base,
          chunkSizeBytes: 8,
          chunksInFlight: 2,
          maxChunksInFlight: 48,
          uploadBytesPerSecond: 10e6, // 10 MB/s ≈ 100 chunks of 8 bytes per 10 ms round trip
          partCounts: [length / 2, length / 2],
          group,
          vector: must(vectors.get(member.peerId)),
          weight: member.weight,
        }),
      ),
    );
    expectBitIdentical(results);
    expect(maxError(must(results[0]).vector, weightedMean(members, vectors, length))).toBeLessThan(1e-6);
    // A window of 2 would leave the stream idle most of each round trip: it grew by the stream's
    // bandwidth-delay product, and kept to the cap.
    for (const result of results) {
      expect(result.largestWindow).toBeGreaterThanOrEqual(16);
      expect(result.largestWindow).toBeLessThanOrEqual(48);
    }
    expect(Math.max(...mostAhead)).toBeGreaterThanOrEqual(16);
    expect(Math.max(...mostAhead)).toBeLessThanOrEqual(48);
  });

  it("sizes the window from the connection's measured round trip, not a slow opening request", async () => {
    const members: GroupMember[] = [
      { peerId: "rtt0", mode: "node", weight: 1 },
      { peerId: "rtt1", mode: "node", weight: 1 },
    ];
    const length = 400;
    const vectors = vectorsFor(members, length, 21);
    /** The largest window of a round whose opening requests take 1 s (a busy machine). */
    const largestWindow = async (connectionRoundTripMs: number | undefined): Promise<number> => {
      const network = new MemoryRpcNetwork();
      const services = members.map((member) => {
        const slowOpening = wrapCallStreams(
          network.add(member.peerId),
          (stream) => stream,
          () => new Promise((resolve) => setTimeout(resolve, 1_000)),
        );
        const service = new AllReduceService({
          rpc:
            connectionRoundTripMs === undefined
              ? slowOpening
              : { ...slowOpening, roundTripMs: () => connectionRoundTripMs },
        });
        service.start();
        return service;
      });
      const group = makeGroup(`rtt-${String(connectionRoundTripMs)}`, members);
      const results = await Promise.all(
        members.map((member, k) =>
          must(services[k]).run({
            ...base,
            chunkSizeBytes: 8,
            chunksInFlight: 2,
            maxChunksInFlight: 48,
            uploadBytesPerSecond: 80, // 0.08 bytes per millisecond: a chunk of 8 bytes per 100 ms
            partCounts: [length / 2, length / 2],
            group,
            vector: must(vectors.get(member.peerId)),
            weight: member.weight,
          }),
        ),
      );
      for (const service of services) service.stop();
      return Math.max(...results.map((result) => result.largestWindow));
    };
    // The opening alone: (1,000+ ms + 200 ms) at a chunk per 100 ms is more than 12 chunks.
    expect(await largestWindow(undefined)).toBeGreaterThan(12);
    // A 1 ms ping on the connection: (1 + 200 ms) is 2.01, 3 chunks.
    expect(await largestWindow(1)).toBe(3);
  });

  it("rejects at the round deadline and honours the caller's signal", async () => {
    const members: GroupMember[] = Array.from({ length: 3 }, (_, i) => ({
      peerId: `d${i}`,
      mode: "node",
      weight: 1,
    }));
    const net = swarm(members);
    const vectors = vectorsFor(members, 300, 9);
    const group = makeGroup("deadline", members);
    const common = { ...base, timeoutMs: 200, partCounts: [100, 100, 100] };
    // d2 never joins the round: its handler keeps the streams waiting for a session.
    const runs = runAll(net, group, vectors, common, ["d0", "d1"]);
    for (const run of runs.values()) {
      const error: unknown = await run.catch((caught: unknown) => caught);
      expect(error).toMatchObject({ code: "ALLREDUCE_FAILED" });
      expect(isSwarmError(error) && isSwarmError(error.cause, "TIMEOUT")).toBe(true);
    }
    must(net.services.get("d2")).stop();

    const controller = new AbortController();
    const aborted = must(net.services.get("d0")).run({
      ...common,
      timeoutMs: 20_000,
      group: makeGroup("aborted", members),
      vector: must(vectors.get("d0")),
      weight: 1,
      signal: controller.signal,
    });
    controller.abort();
    await expect(aborted).rejects.toMatchObject({ code: "ABORTED" });
    for (const service of net.services.values()) service.stop();
  });

  it("refuses local input that does not fit the group", async () => {
    const members: GroupMember[] = [
      { peerId: "x", mode: "node", weight: 2 },
      { peerId: "y", mode: "node", weight: 1 },
    ];
    const { services } = swarm(members);
    const service = must(services.get("x"));
    const run = (change: Partial<AllReduceRunOptions>) =>
      service.run({
        ...base,
        group: makeGroup("local", members),
        vector: new Float32Array(4),
        weight: 2,
        partCounts: [2, 2],
        ...change,
      });
    await expect(run({ weight: 0 })).rejects.toMatchObject({ code: "ALLREDUCE_FAILED" });
    await expect(run({ vector: Float32Array.of(1, Number.POSITIVE_INFINITY, 0, 0) })).rejects.toMatchObject({
      code: "ALLREDUCE_FAILED",
    });
    await expect(run({ partCounts: [2, 3] })).rejects.toMatchObject({ code: "LENGTH_MISMATCH" });
  });
});
