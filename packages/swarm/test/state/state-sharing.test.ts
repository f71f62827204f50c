import { pino } from "pino";
import { describe, expect, it } from "vitest";
import { isSwarmError } from "../../src/errors.ts";
import { stateChunksMethod, stateManifestMethod } from "../../src/state/state-messages.ts";
import { StateSharing, type StateDownloadOptions } from "../../src/state/state-sharing.ts";
import { createStateSnapshot, snapshotChunk, type StateSnapshot } from "../../src/state/state-snapshot.ts";
import type { TrainingState } from "../../src/state/training-state.ts";
import { MemoryRpcNetwork, type MemoryRpc } from "../support/memory-rpc.ts";
import { seededFloats, seededRandom } from "../support/seeded-random.ts";

function randomState(seed: number, size: number, epoch: number): TrainingState {
  return {
    epoch,
    parameters: seededFloats(seed, size),
    optimizer: {
      name: "lamb",
      step: epoch,
      slots: { m: seededFloats(seed + 1, size), v: seededFloats(seed + 2, size) },
    },
  };
}

/** Asserts `actual` is bit-identical to `expected`. */
function expectSameState(actual: TrainingState, expected: TrainingState): void {
  const bytes = (array: Float32Array) => Buffer.from(array.buffer, array.byteOffset, array.byteLength);
  expect(actual.epoch).toBe(expected.epoch);
  expect(actual.optimizer.name).toBe(expected.optimizer.name);
  expect(actual.optimizer.step).toBe(expected.optimizer.step);
  expect(bytes(actual.parameters).equals(bytes(expected.parameters))).toBe(true);
  expect(Object.keys(actual.optimizer.slots).sort()).toEqual(Object.keys(expected.optimizer.slots).sort());
  for (const [name, slot] of Object.entries(expected.optimizer.slots)) {
    expect(bytes(present(actual.optimizer.slots[name])).equals(bytes(slot)), `slot ${name}`).toBe(true);
  }
}

function present<T>(value: T | null | undefined): T {
  if (value === null || value === undefined) throw new Error("expected a value");
  return value;
}

const CHUNK = 4096;

interface Swarm {
  network: MemoryRpcNetwork;
  downloader: StateSharing;
  donors: Map<string, StateSharing>;
  /** Every "dropping state donor" warning: peer → reason. */
  dropped: Map<string, string>;
}

function swarm(states: Record<string, TrainingState | null>, chunkBytes = CHUNK): Swarm {
  const network = new MemoryRpcNetwork();
  const dropped = new Map<string, string>();
  const logger = pino(
    { level: "warn" },
    {
      write(line: string) {
        const entry = JSON.parse(line) as { msg: string; peer?: string; reason?: string };
        if (entry.msg === "dropping state donor") dropped.set(entry.peer ?? "", entry.reason ?? "");
      },
    },
  );
  const donors = new Map<string, StateSharing>();
  for (const [peer, state] of Object.entries(states)) {
    const sharing = new StateSharing({ rpc: network.add(peer), chunkBytes, getState: () => state });
    sharing.start();
    donors.set(peer, sharing);
  }
  const downloader = new StateSharing({ rpc: network.add("new"), chunkBytes, getState: () => null, logger });
  downloader.start();
  return { network, downloader, donors, dropped };
}

function donor(s: Swarm, peer: string): StateSharing {
  return present(s.donors.get(peer));
}

function snapshotOf(s: Swarm, peer: string): StateSnapshot {
  return present(donor(s, peer).snapshot());
}

/** Flips one bit in the middle of `chunk`. */
function flipBit(chunk: Uint8Array): Uint8Array {
  const copy = chunk.slice();
  copy.set([present(copy[copy.length >> 1]) ^ 0x40], copy.length >> 1);
  return copy;
}

/** A donor with a consistent manifest for `state` that passes every chunk it serves through `tamper`. */
function lyingDonor(
  rpc: MemoryRpc,
  state: TrainingState,
  tamper: (chunk: Uint8Array, index: number) => Uint8Array,
): { served: number } {
  const snapshot = createStateSnapshot(state, CHUNK);
  const counter = { served: 0 };
  serveManifest(rpc, snapshot);
  rpc.handle(stateChunksMethod, async (incoming) => {
    const stream = await incoming.respond({ ok: true });
    for (let index = incoming.head.fromChunk; index < incoming.head.toChunk; index++) {
      await stream.write(tamper(snapshotChunk(snapshot, index), index));
      counter.served++;
    }
    await stream.closeWrite();
  });
  return counter;
}

function serveManifest(rpc: MemoryRpc, snapshot: StateSnapshot): void {
  rpc.handle(stateManifestMethod, async (incoming) => {
    const stream = await incoming.respond({
      epoch: snapshot.epoch,
      totalBytes: snapshot.blob.length,
      chunkBytes: snapshot.chunkBytes,
      root: snapshot.root,
      chunkHashes: [...snapshot.chunkHashes],
    });
    await stream.closeWrite();
  });
}

async function failure(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => expect.fail("expected the download to fail"),
    (error: unknown) => error,
  );
}

function download(s: Swarm, options: Partial<StateDownloadOptions> = {}): Promise<TrainingState> {
  return s.downloader.download({ donors: [...s.donors.keys()], minEpoch: 0, ...options });
}

describe("StateSharing", () => {
  it("downloads a bit-identical state spread over every donor, reporting progress", async () => {
    const state = randomState(1, 20_000, 12);
    const s = swarm({ a: state, b: state, c: state, d: state });
    const progress: Array<[number, number]> = [];
    const got = await download(s, {
      minEpoch: 10,
      onProgress: (bytes, total) => progress.push([bytes, total]),
    });
    expectSameState(got, state);
    for (const [peer, donor] of s.donors) expect(donor.servedChunks, peer).toBeGreaterThan(0);
    const total = snapshotOf(s, "a").blob.length;
    expect(progress.at(-1)).toEqual([total, total]);
    expect(progress).toHaveLength(Math.ceil(total / CHUNK));
    expect(progress.every(([bytes], i) => i === 0 || bytes > present(progress[i - 1])[0])).toBe(true);
    expect(s.dropped.size).toBe(0);
  });

  it("detects donors that serve corrupted or truncated chunks and finishes from the others", async () => {
    const state = randomState(2, 20_000, 3);
    const s = swarm({ a: state, b: state, c: state });
    const liar = lyingDonor(s.network.add("liar"), state, (chunk, index) =>
      index % 2 === 1 ? flipBit(chunk) : chunk,
    );
    const cutter = lyingDonor(s.network.add("cutter"), state, (chunk) => chunk.subarray(1));
    const got = await s.downloader.download({ donors: ["a", "liar", "b", "cutter", "c"], minEpoch: 0 });
    expectSameState(got, state);
    expect(liar.served).toBeGreaterThan(0);
    expect(cutter.served).toBeGreaterThan(0);
    expect(s.dropped.get("liar")).toMatch(/chunk \d+ does not match its hash/);
    expect(s.dropped.get("cutter")).toMatch(/chunk \d+ is \d+ bytes, expected \d+/);
    expect([...s.dropped.keys()].sort()).toEqual(["cutter", "liar"]);
  });

  it("survives a donor killed mid-download", async () => {
    const state = randomState(3, 60_000, 8);
    const s = swarm({ a: state, b: state, c: state, d: state });
    const victim = donor(s, "b");
    let killedAfter = -1;
    const got = await download(s, {
      onProgress: () => {
        if (killedAfter < 0 && victim.servedChunks >= 2) {
          killedAfter = victim.servedChunks;
          s.network.kill("b");
        }
      },
    });
    expectSameState(got, state);
    expect(killedAfter).toBeGreaterThan(0);
    const chunks = snapshotOf(s, "a").chunkHashes.length;
    expect(victim.servedChunks).toBeLessThan(chunks / 4);
    expect(s.dropped.get("b")).toMatch(/PEER_UNREACHABLE/);
  });

  it("drops a donor that stalls and reassigns its chunks", async () => {
    const state = randomState(4, 10_000, 1);
    const s = swarm({ a: state, b: state });
    const staller = s.network.add("staller");
    serveManifest(staller, createStateSnapshot(state, CHUNK));
    staller.handle(stateChunksMethod, async (incoming) => {
      await incoming.respond({ ok: true });
      await new Promise((resolve) => {
        incoming.signal.addEventListener("abort", resolve, { once: true });
      });
    });
    const got = await s.downloader.download({ donors: ["staller", "a", "b"], minEpoch: 0, timeoutMs: 100 });
    expectSameState(got, state);
    expect(s.dropped.get("staller")).toMatch(/TIMEOUT/);
  });

  it("fails with STATE_UNAVAILABLE, saying why, when every donor is bad", async () => {
    const state = randomState(5, 5_000, 2);
    const liars = swarm({});
    for (const peer of ["x", "y"])
      lyingDonor(liars.network.add(peer), state, (chunk, index) => (index === 3 ? flipBit(chunk) : chunk));
    const error = await failure(liars.downloader.download({ donors: ["x", "y"], minEpoch: 0 }));
    expect(isSwarmError(error, "STATE_UNAVAILABLE")).toBe(true);
    expect(String(error)).toMatch(/x: epoch 2: chunk 3 does not match its hash/);
    expect(String(error)).toMatch(/y: epoch 2: chunk 3 does not match its hash/);

    const empty = swarm({ a: null, b: randomState(6, 10, 4) });
    const none = await failure(download(empty, { minEpoch: 5 }));
    expect(isSwarmError(none, "STATE_UNAVAILABLE")).toBe(true);
    expect(String(none)).toMatch(/have no state/);
    expect(String(none)).toMatch(/have epoch 4/);

    const unreachable = await failure(empty.downloader.download({ donors: ["ghost"], minEpoch: 0 }));
    expect(isSwarmError(unreachable, "STATE_UNAVAILABLE")).toBe(true);
    expect(String(unreachable)).toMatch(/ghost: manifest: PEER_UNREACHABLE/);

    const nobody = await failure(empty.downloader.download({ donors: [], minEpoch: 0 }));
    expect(isSwarmError(nobody, "STATE_UNAVAILABLE")).toBe(true);
  });

  it("takes the newest epoch, and the root most donors agree on", async () => {
    const old = randomState(7, 5_000, 5);
    const newest = randomState(8, 5_000, 9);
    const s = swarm({ a: old, b: newest, c: old, d: newest });
    expectSameState(await download(s), newest);
    expect(donor(s, "a").servedChunks).toBe(0);
    expect(donor(s, "b").servedChunks).toBeGreaterThan(0);

    const minority = randomState(9, 5_000, 9);
    const split = swarm({ a: minority, b: newest, c: newest });
    expectSameState(await download(split), newest);
    expect(donor(split, "a").servedChunks).toBe(0);
  });

  it("falls back to an older acceptable state when the newest one cannot be fetched", async () => {
    const old = randomState(10, 5_000, 5);
    const s = swarm({ a: old, b: old });
    lyingDonor(s.network.add("liar"), randomState(11, 5_000, 7), flipBit);
    const got = await s.downloader.download({ donors: ["liar", "a", "b"], minEpoch: 4 });
    expectSameState(got, old);
    expect(s.dropped.get("liar")).toMatch(/epoch 7: chunk 0 does not match/);
  });

  it("drops donors whose manifests cannot be trusted", async () => {
    const state = randomState(12, 5_000, 3);
    const s = swarm({ a: state });
    const snapshot = createStateSnapshot(state, CHUNK);
    serveManifest(s.network.add("forger"), { ...snapshot, root: new Uint8Array(32) });
    serveManifest(s.network.add("stale"), createStateSnapshot(randomState(13, 5_000, 1), CHUNK));
    const got = await s.downloader.download({ donors: ["forger", "stale", "a"], minEpoch: 2 });
    expectSameState(got, state);
    expect(s.dropped.get("forger")).toMatch(/manifest root does not match/);
    expect(s.dropped.get("stale")).toMatch(/offered epoch 1, below 2/);
  });

  it("takes only a state of the generation asked for, and the generation and samples it carries", async () => {
    const rolledBack = { ...randomState(20, 5_000, 4), generation: 1, samples: 4096 };
    const older = { ...randomState(21, 5_000, 9), generation: 0, samples: 9000 };
    const s = swarm({ a: rolledBack, b: older });
    const got = await download(s, { generation: 1 });
    expectSameState(got, rolledBack);
    expect(got).toMatchObject({ generation: 1, samples: 4096 });
    expect(s.dropped.get("b")).toMatch(/STATE_UNAVAILABLE.*asked for generation 1, have generation 0/);
    // Left out, any generation: the newest epoch wins.
    expect((await download(s)).generation).toBe(0);
    const none = await failure(download(s, { generation: 2 }));
    expect(isSwarmError(none, "STATE_UNAVAILABLE")).toBe(true);
  });

  it("rejects a downloaded state of another generation than asked for, whatever the donor claims", async () => {
    const s = swarm({});
    // A donor that ignores the generation of the request: its manifest and chunks are consistent.
    lyingDonor(s.network.add("mixer"), { ...randomState(22, 5_000, 5), generation: 3 }, (chunk) => chunk);
    const error = await failure(s.downloader.download({ donors: ["mixer"], minEpoch: 0, generation: 4 }));
    expect(isSwarmError(error, "STATE_UNAVAILABLE")).toBe(true);
    expect(s.dropped.get("mixer")).toMatch(/state is of generation 3, not 4/);
  });

  it("serves a new snapshot when the state changes generation at the same epoch", () => {
    let state: TrainingState = randomState(23, 1_000, 5);
    const network = new MemoryRpcNetwork();
    const sharing = new StateSharing({ rpc: network.add("a"), chunkBytes: CHUNK, getState: () => state });
    const first = present(sharing.snapshot());
    expect(sharing.snapshot()).toBe(first);
    state = { ...randomState(24, 1_000, 5), generation: 1 };
    const second = present(sharing.snapshot());
    expect(second).not.toBe(first);
    expect(second.generation).toBe(1);
  });

  it("keeps serving the snapshot a download started on after the donors move to a new epoch", async () => {
    const before = randomState(13, 20_000, 3);
    const live: Record<string, TrainingState> = { a: before, b: before };
    const network = new MemoryRpcNetwork();
    const donors = Object.keys(live).map((peer) => {
      const sharing = new StateSharing({
        rpc: network.add(peer),
        chunkBytes: CHUNK,
        getState: () => live[peer] ?? null,
      });
      sharing.start();
      return sharing;
    });
    const expected = structuredClone(before);
    const downloader = new StateSharing({ rpc: network.add("new"), chunkBytes: CHUNK, getState: () => null });
    downloader.start();
    let stepped = false;
    const servedEpochs: number[] = [];
    const got = await downloader.download({
      donors: ["a", "b"],
      minEpoch: 0,
      onProgress: () => {
        if (stepped) return;
        stepped = true;
        before.parameters.fill(7); // an in-place step within the epoch …
        for (const peer of Object.keys(live)) live[peer] = randomState(14, 20_000, 4); // … then a new epoch
        for (const donor of donors) servedEpochs.push(donor.snapshot()?.epoch ?? -1);
      },
    });
    expectSameState(got, expected);
    expect(servedEpochs).toEqual([4, 4]);
  });

  it("refuses malformed or stale requests with typed errors", async () => {
    const state = randomState(15, 5_000, 6);
    const s = swarm({ a: state });
    const rpc = present(s.network.get("new"));
    const manifest = await rpc.request("a", stateManifestMethod, { minEpoch: 6 });
    const chunks = manifest.chunkHashes.length;
    const ask = (head: Record<string, unknown>) =>
      rpc.call("a", stateChunksMethod, { epoch: 6, root: manifest.root, fromChunk: 0, toChunk: 1, ...head });
    await expect(rpc.request("a", stateManifestMethod, { minEpoch: 7 })).rejects.toMatchObject({
      code: "REMOTE_ERROR",
      remoteCode: "STATE_UNAVAILABLE",
    });
    await expect(ask({ epoch: 5 })).rejects.toMatchObject({
      code: "REMOTE_ERROR",
      remoteCode: "STATE_UNAVAILABLE",
    });
    await expect(ask({ root: new Uint8Array(32) })).rejects.toMatchObject({
      remoteCode: "STATE_UNAVAILABLE",
    });
    await expect(ask({ toChunk: chunks + 1 })).rejects.toMatchObject({ remoteCode: "MALFORMED_MESSAGE" });
    await expect(ask({ fromChunk: 1, toChunk: 1 })).rejects.toMatchObject({ code: "MALFORMED_MESSAGE" });
    await expect(ask({ root: new Uint8Array(8) })).rejects.toMatchObject({ code: "MALFORMED_MESSAGE" });
    await expect(rpc.request("a", stateManifestMethod, { minEpoch: -1 })).rejects.toMatchObject({
      code: "MALFORMED_MESSAGE",
    });
    const { stream } = await ask({ fromChunk: chunks - 1, toChunk: chunks });
    await stream.closeWrite();
    expect(await stream.read()).toEqual(snapshotChunk(snapshotOf(s, "a"), chunks - 1));
    expect(await stream.read()).toBeNull();
  });

  it("spreads a hundred newcomers arriving together over all donors", async () => {
    // A small model's state is one chunk, so each newcomer takes it whole from one donor: before
    // the donors were shuffled, every newcomer took it from the first one it was given.
    const state = randomState(18, 200, 4);
    const s = swarm({ a: state, b: state, c: state, d: state, e: state });
    expect(snapshotOf(s, "a").chunkHashes).toHaveLength(1);
    const newcomers = Array.from({ length: 100 }, (_, index) => {
      const sharing = new StateSharing({
        rpc: s.network.add(`newcomer-${index}`),
        chunkBytes: CHUNK,
        getState: () => null,
        random: seededRandom(1000 + index),
      });
      sharing.start();
      return sharing;
    });
    const states = await Promise.all(
      newcomers.map((newcomer) => newcomer.download({ donors: [...s.donors.keys()], minEpoch: 4 })),
    );
    for (const got of states) expectSameState(got, state);
    const served = [...s.donors.values()].map((donor) => donor.servedChunks);
    expect(served.reduce((sum, count) => sum + count, 0)).toBe(100);
    // A fair share is 20 each; every donor serves some, none more than twice its share.
    for (const count of served) expect(count).toBeGreaterThan(5);
    expect(Math.max(...served)).toBeLessThanOrEqual(40);
  });

  it("moves a big state (3 M floats) in small chunks", async () => {
    const state = randomState(16, 1_000_000, 20);
    const s = swarm({ a: state, b: state, c: state }, 64 << 10);
    expectSameState(await download(s), state);
    for (const donor of s.donors.values()) expect(donor.servedChunks).toBeGreaterThan(0);
  });

  it("aborts on the caller's signal and refuses to download when stopped", async () => {
    const state = randomState(17, 20_000, 1);
    const s = swarm({ a: state, b: state });
    const controller = new AbortController();
    const aborted = await failure(
      download(s, {
        signal: controller.signal,
        onProgress: () => {
          controller.abort();
        },
      }),
    );
    expect(isSwarmError(aborted, "ABORTED")).toBe(true);
    s.downloader.stop();
    const stopped = await failure(download(s));
    expect(isSwarmError(stopped, "NOT_RUNNING")).toBe(true);
  });
});
