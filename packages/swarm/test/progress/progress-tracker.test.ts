import { pino } from "pino";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { z } from "zod";
import { defineMethod } from "../../src/rpc/rpc.ts";
import { MAX_PERIOD_MS, progressMethod, type ProgressRecord } from "../../src/progress/progress-messages.ts";
import {
  NEWCOMER_GRACE_MS,
  ProgressTracker,
  type PeerProgressRecord,
  type ProgressLogger,
  type ProgressTrackerOptions,
  publishPeriodMs,
} from "../../src/progress/progress-tracker.ts";
import { MemoryRpcNetwork, type MemoryRpc } from "../support/memory-rpc.ts";

/** The same wire name as `progressMethod` but no schema on the sender, to send what a hostile peer would. */
const looseProgress = defineMethod({
  name: "progress",
  request: z.unknown(),
  response: z.unknown(),
  maxFrameBytes: 1024,
});

const clock = { now: 1_700_000_000_000 };
const now = () => clock.now;
const started: ProgressTracker[] = [];

// The push timer never fires on its own: tests drive pushes with pushNow() and a fake clock.
beforeEach(() => {
  vi.useFakeTimers({ toFake: ["setInterval", "clearInterval"] });
});

afterEach(() => {
  for (const tracker of started.splice(0)) tracker.stop();
  vi.useRealTimers();
});

/** Lets every pending in-memory exchange finish (the memory rpc runs on promises only). */
const settle = () => new Promise<void>((resolve) => setImmediate(resolve));

function tracker(
  rpc: MemoryRpc,
  peers: () => readonly string[],
  extra: Partial<ProgressTrackerOptions> = {},
) {
  const result = new ProgressTracker({ rpc, peers, targetBatchSize: 1000, now, ...extra });
  result.start();
  started.push(result);
  return result;
}

function validRecord(overrides: Partial<ProgressRecord> = {}): ProgressRecord {
  return {
    epoch: 1,
    samplesAccumulated: 10,
    samplesPerSecond: 1,
    time: clock.now,
    mode: "node",
    lossSum: 2,
    minibatches: 1,
    step: 1,
    bytesAggregated: 0,
    ...overrides,
  };
}

/** A swarm of trackers, each connected to all the others. */
function swarm(size: number, extra: Partial<ProgressTrackerOptions> = {}) {
  const network = new MemoryRpcNetwork();
  const ids = Array.from({ length: size }, (_, i) => `p${i}`);
  const trackers = ids.map((id) => {
    const rpc = network.add(id);
    return tracker(rpc, () => ids.filter((other) => other !== id), extra);
  });
  const pushAll = () => Promise.all(trackers.map((t) => t.pushNow()));
  return { network, ids, trackers, pushAll };
}

describe("ProgressTracker", () => {
  it("lets 8 peers converge on the same estimate, extrapolated as time passes", async () => {
    const { trackers, pushAll } = swarm(8);
    trackers.forEach((t, i) => {
      t.report({ epoch: i === 7 ? 2 : 3, samplesAccumulated: 10 * i, samplesPerSecond: i });
    });
    await pushAll();
    const views = trackers.map((t) => t.snapshot());
    for (const view of views) {
      expect(view).toMatchObject({ epoch: 3, alivePeers: 8, samplesAccumulated: 210, readyToAverage: false });
      expect(view.etaSeconds).toBeCloseTo((1000 - 210) / 28);
    }
    clock.now += 2_000;
    const later = trackers.map((t) => t.global());
    // peers p0..p6 are at epoch 3 with Σ samples/s = 21
    for (const view of later) expect(view.samplesAccumulated).toBeCloseTo(210 + 21 * 2);
    expect(new Set(later.map((view) => JSON.stringify(view))).size).toBe(1);
  });

  it("pushes at once when the epoch changes, and reports the highest epoch", async () => {
    const { trackers } = swarm(3);
    const [a, b, c] = trackers as [ProgressTracker, ProgressTracker, ProgressTracker];
    b.report({ epoch: 4, samplesAccumulated: 5, samplesPerSecond: 0 });
    c.report({ epoch: 8, samplesAccumulated: 5, samplesPerSecond: 0 });
    const updates: PeerProgressRecord[] = [];
    const off = a.on("update", (update) => updates.push(update));
    clock.now += 1_000; // past the minimum gap between two publishes
    b.report({ epoch: 9, samplesAccumulated: 0, samplesPerSecond: 0 });
    await settle();
    off();
    expect(updates.filter((u) => u.record.epoch === 9).map((u) => u.peerId)).toEqual(["p1"]);
    b.report({ epoch: 9, samplesAccumulated: 3, samplesPerSecond: 0 });
    await settle();
    expect(updates.filter((u) => u.record.samplesAccumulated === 3)).toEqual([]);
    expect(a.snapshot().epoch).toBe(9);
    expect(a.global()).toEqual({
      epoch: 9,
      samplesAccumulated: 0,
      targetBatchSize: 1000,
      etaSeconds: Infinity,
    });
  });

  it("says at once that the volunteer's rules hold this trainer, keeps it in later reports, and at once that it trains again", async () => {
    const { trackers } = swarm(2);
    const [a, b] = trackers as [ProgressTracker, ProgressTracker];
    a.report({ epoch: 3, samplesAccumulated: 100, samplesPerSecond: 50 });
    b.report({ epoch: 3, samplesAccumulated: 200, samplesPerSecond: 0 });
    await settle();
    expect(b.snapshot()).toMatchObject({ alivePeers: 2, samplesAccumulated: 300 });
    const updates: PeerProgressRecord[] = [];
    b.on("update", (update) => updates.push(update));
    clock.now += 1_000;
    a.setPaused(["in-use", "battery"]);
    await settle();
    // Published without waiting for the period: b counts it no more, but holds its record.
    expect(updates.map((u) => u.record.paused)).toEqual([["in-use", "battery"]]);
    expect(b.snapshot()).toMatchObject({ alivePeers: 1, samplesAccumulated: 200 });
    expect(b.records().map((entry) => entry.peerId)).toEqual(["p0"]);
    // A report while paused (a round's end, a state load) keeps saying so.
    a.report({ epoch: 4, samplesAccumulated: 0, samplesPerSecond: 50 });
    expect(a.localRecord()?.paused).toEqual(["in-use", "battery"]);
    // The same reasons again send nothing.
    clock.now += 1_000;
    await settle();
    const before = updates.length;
    a.setPaused(["in-use", "battery"]);
    await settle();
    expect(updates.length).toBe(before);
    a.setPaused([]);
    await settle();
    expect(a.localRecord()?.paused).toBeUndefined();
    expect(updates.at(-1)?.record.paused).toBeUndefined();
    expect(b.snapshot().alivePeers).toBe(2);
    expect(() => {
      a.setPaused(["busy", "busy"]);
    }).toThrow(/pause reasons/);
  });

  it("forgets a silent peer after the ttl", async () => {
    const { trackers, pushAll } = swarm(2, { intervalMs: 1000 });
    const [a, b] = trackers as [ProgressTracker, ProgressTracker];
    a.report({ epoch: 1, samplesAccumulated: 10, samplesPerSecond: 0 });
    b.report({ epoch: 5, samplesAccumulated: 20, samplesPerSecond: 0 });
    await pushAll();
    expect(a.snapshot()).toMatchObject({ alivePeers: 2, epoch: 5 });
    clock.now += 5_000; // the default ttl is 3 × 1 s + 2 s
    expect(a.records().map((r) => r.peerId)).toEqual(["p1"]);
    clock.now += 1;
    expect(a.records()).toEqual([]);
    expect(a.snapshot()).toMatchObject({ alivePeers: 1, epoch: 1, samplesAccumulated: 10 });
  });

  it("keys records by the authenticated sender and takes username and role from its pass", async () => {
    const network = new MemoryRpcNetwork();
    const a = tracker(network.add("a"), () => []);
    const b = tracker(network.add("b", "aux"), () => ["a"]);
    const mallory = network.add("mallory");
    b.report({ epoch: 2, samplesAccumulated: 0, samplesPerSecond: 0, mode: "aux" });
    await b.pushNow();
    // a body cannot name a peer: the schema is strict
    await expect(
      mallory.request("a", looseProgress, { ...validRecord(), peerId: "b" }),
    ).rejects.toMatchObject({
      code: "MALFORMED_MESSAGE",
    });
    await mallory.request("a", progressMethod, validRecord({ epoch: 7 }));
    const records = a.records().sort((x, y) => x.peerId.localeCompare(y.peerId));
    expect(
      records.map(({ peerId, username, role, record }) => ({ peerId, username, role, epoch: record.epoch })),
    ).toEqual([
      { peerId: "b", username: "user-b", role: "aux", epoch: 2 },
      { peerId: "mallory", username: "user-mallory", role: "trainer", epoch: 7 },
    ]);
  });

  it("refuses a record that does not fit the sender's pass role, saying what, and takes an aux's own", async () => {
    const network = new MemoryRpcNetwork();
    const a = tracker(network.add("a"), () => []);
    const aux = network.add("x", "aux");
    const trainer = network.add("t");
    const refused = (what: RegExp): unknown =>
      expect.objectContaining({
        code: "REMOTE_ERROR",
        remoteCode: "MALFORMED_MESSAGE",
        message: expect.stringMatching(what) as unknown,
      });
    await expect(
      aux.request("a", progressMethod, validRecord({ samplesAccumulated: 500, samplesPerSecond: 30 })),
    ).rejects.toEqual(
      refused(
        /an aux pass cannot claim mode node, samplesAccumulated 500, samplesPerSecond 30, lossSum 2, minibatches 1$/,
      ),
    );
    const idle = { samplesAccumulated: 0, samplesPerSecond: 0, lossSum: 0, minibatches: 0 };
    await expect(
      aux.request(
        "a",
        progressMethod,
        validRecord({ ...idle, mode: "aux", samplesTotal: 9, computeSeconds: 3 }),
      ),
    ).rejects.toEqual(refused(/cannot claim samplesTotal 9, computeSeconds 3$/));
    await expect(
      aux.request(
        "a",
        progressMethod,
        validRecord({ ...idle, mode: "aux", previous: { epoch: 0, lossSum: 1, minibatches: 2 } }),
      ),
    ).rejects.toEqual(refused(/cannot claim previous.lossSum 1, previous.minibatches 2$/));
    await expect(trainer.request("a", progressMethod, validRecord({ mode: "aux" }))).rejects.toEqual(
      refused(/a trainer pass cannot claim mode aux$/),
    );
    expect(a.records()).toEqual([]);
    expect(a.snapshot()).toMatchObject({ alivePeers: 0, samplesPerSecond: 0 });

    // What an aux publishes: the round it helps average and the state it serves, no samples.
    await aux.request(
      "a",
      progressMethod,
      validRecord({
        ...idle,
        mode: "aux",
        averagingEpoch: 1,
        stateEpoch: 1,
        bytesAggregated: 4096,
        round: { epoch: 0, bytesSent: 100 },
      }),
    );
    expect(a.records()).toMatchObject([
      { peerId: "x", role: "aux", record: { mode: "aux", averagingEpoch: 1 } },
    ]);
  });

  it("refuses malformed records with MALFORMED_MESSAGE and keeps working", async () => {
    const network = new MemoryRpcNetwork();
    const a = tracker(network.add("a"), () => []);
    const sender = network.add("s");
    const bad: unknown[] = [
      { ...validRecord(), epoch: -1 },
      { ...validRecord(), samplesAccumulated: 1.5 },
      { ...validRecord(), samplesPerSecond: Infinity },
      { ...validRecord(), lossSum: Number.NaN },
      { ...validRecord(), mode: "boss" },
      { ...validRecord(), minibatches: 2 ** 60 },
      { ...validRecord(), epoch: 2 ** 50 },
      { ...validRecord(), samplesPerSecond: 1e10 },
      { ...validRecord(), extra: 1 },
      (({ time: _time, ...rest }) => rest)(validRecord()),
      { ...validRecord(), session: "" },
      { ...validRecord(), session: "a".repeat(33) },
      { ...validRecord(), session: "no spaces" },
      { ...validRecord(), generation: -1 },
      { ...validRecord(), stateEpoch: 1.5 },
      "progress",
    ];
    for (const body of bad) {
      await expect(sender.request("a", looseProgress, body)).rejects.toMatchObject({
        code: "MALFORMED_MESSAGE",
      });
    }
    expect(a.records()).toEqual([]);
    await sender.request("a", progressMethod, validRecord({ samplesAccumulated: 33 }));
    expect(a.records().map((r) => r.record.samplesAccumulated)).toEqual([33]);
  });

  it("puts its session into every record, with the generation and served state it reports", async () => {
    const network = new MemoryRpcNetwork();
    const a = tracker(network.add("a"), () => []);
    const b = tracker(network.add("b", "aux"), () => ["a"], { session: "run_2-Ab", mode: () => "aux" });
    b.report({ epoch: 6, samplesAccumulated: 0, samplesPerSecond: 0, generation: 1, stateEpoch: 6 });
    await b.pushNow();
    expect(a.records()[0]?.record).toMatchObject({ session: "run_2-Ab", generation: 1, stateEpoch: 6 });
    b.report({ epoch: 7, averagingEpoch: 7, samplesAccumulated: 0, samplesPerSecond: 0 });
    expect(b.localRecord()).toMatchObject({ session: "run_2-Ab", generation: 1, stateEpoch: 6 });
    expect(b.generation()).toBe(1);
    for (const session of ["", "x".repeat(33), "a b", "ü"]) {
      expect(
        () =>
          new ProgressTracker({
            rpc: network.add(`bad${session.length}`),
            peers: () => [],
            targetBatchSize: 1,
            session,
          }),
      ).toThrow(expect.objectContaining({ code: "MALFORMED_MESSAGE" }));
    }
  });

  it("gives the view of any epoch as if it were the swarm's, among peers of its own generation", async () => {
    const { trackers, pushAll } = swarm(4, { targetBatchSize: 100 });
    const [a, b, c, d] = trackers as [ProgressTracker, ProgressTracker, ProgressTracker, ProgressTracker];
    a.report({ epoch: 2, samplesAccumulated: 30, samplesPerSecond: 0 });
    b.report({ epoch: 2, samplesAccumulated: 40, samplesPerSecond: 0 });
    c.report({ epoch: 4, samplesAccumulated: 10, samplesPerSecond: 0 });
    d.report({ epoch: 2, samplesAccumulated: 50, samplesPerSecond: 0, generation: 1 });
    await pushAll();
    expect(a.global()).toMatchObject({ epoch: 4, samplesAccumulated: 10 });
    expect(a.at(2)).toEqual({
      epoch: 2,
      samplesAccumulated: 70,
      targetBatchSize: 100,
      etaSeconds: Infinity,
      peersAtEpoch: 2,
    });
    expect(
      a
        .records({ sameGeneration: true })
        .map((r) => r.peerId)
        .sort(),
    ).toEqual(["p1", "p2"]);
    expect(d.at(2)).toMatchObject({ samplesAccumulated: 50, peersAtEpoch: 1 });
    expect(d.snapshot()).toMatchObject({ epoch: 2, generation: 1, alivePeers: 1 });
  });

  it("looks back: the view a moment ago, by the records held now", async () => {
    const { trackers, pushAll } = swarm(2, { targetBatchSize: 100 });
    const [a, b] = trackers as [ProgressTracker, ProgressTracker];
    a.report({ epoch: 1, samplesAccumulated: 40, samplesPerSecond: 0 });
    b.report({ epoch: 1, samplesAccumulated: 30, samplesPerSecond: 20 });
    await pushAll();
    clock.now += 1_000;
    a.report({ epoch: 1, samplesAccumulated: 40, samplesPerSecond: 0 });
    // b's 30 samples a second ago, extrapolated at 20 samples/s: 50 now, 45 a quarter second ago
    expect(a.global().samplesAccumulated).toBeCloseTo(90);
    expect(a.globalBefore(250).samplesAccumulated).toBeCloseTo(85);
    expect(a.globalBefore(2_000).samplesAccumulated).toBeCloseTo(70); // never extrapolated backwards
    expect(a.globalBefore(0)).toEqual(a.global());
  });

  it("flips readyToAverage when the swarm reaches the target", async () => {
    const { trackers, pushAll } = swarm(2, { targetBatchSize: 100 });
    const [a, b] = trackers as [ProgressTracker, ProgressTracker];
    a.report({ epoch: 1, samplesAccumulated: 40, samplesPerSecond: 0 });
    b.report({ epoch: 1, samplesAccumulated: 59, samplesPerSecond: 0 });
    await pushAll();
    expect(a.snapshot().readyToAverage).toBe(false);
    expect(b.snapshot().etaSeconds).toBe(Infinity);
    clock.now += 1_000;
    b.report({ epoch: 1, samplesAccumulated: 60, samplesPerSecond: 0 });
    await pushAll();
    expect(a.snapshot()).toMatchObject({ readyToAverage: true, samplesAccumulated: 100, etaSeconds: 0 });
    expect(b.snapshot().readyToAverage).toBe(true);
  });

  it("drops records that arrive too fast from one peer and caps the table", async () => {
    const network = new MemoryRpcNetwork();
    const a = tracker(network.add("a"), () => [], { maxPeers: 3, maxRecordsPerSecond: 10 });
    let accepted = 0;
    a.on("update", () => accepted++);
    const flooder = network.add("flooder");
    for (let i = 0; i < 15; i++)
      await flooder.request("a", progressMethod, validRecord({ samplesAccumulated: i }));
    expect(accepted).toBe(10);
    expect(a.records()[0]?.record.samplesAccumulated).toBe(9);
    clock.now += 200; // two more records' worth of budget
    for (let i = 0; i < 3; i++)
      await flooder.request("a", progressMethod, validRecord({ samplesAccumulated: 100 + i }));
    expect(accepted).toBe(12);

    const late = ["x", "y", "z"].map((id) => network.add(id));
    for (const rpc of late) await rpc.request("a", progressMethod, validRecord());
    expect(
      a
        .records()
        .map((r) => r.peerId)
        .sort(),
    ).toEqual(["flooder", "x", "y"]);
    clock.now += 10_000; // all expire; a newcomer now fits
    await late[2]?.request("a", progressMethod, validRecord());
    expect(a.records().map((r) => r.peerId)).toEqual(["z"]);
  });

  it("never overlaps pushes to one peer and never throws on failures", async () => {
    const network = new MemoryRpcNetwork();
    const debug: string[] = [];
    const logger: ProgressLogger = { debug: (_fields, message) => debug.push(message) };
    const a = tracker(network.add("a"), () => ["slow", "ghost"], { logger });
    const slow = network.add("slow");
    let inFlight = 0;
    let maxInFlight = 0;
    const received: number[] = [];
    const gates: Array<() => void> = [];
    slow.handle(progressMethod, async (incoming) => {
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      await new Promise<void>((resolve) => gates.push(resolve));
      received.push(incoming.head.samplesAccumulated);
      inFlight--;
      await incoming.respond({ ok: true });
    });
    a.report({ epoch: 1, samplesAccumulated: 1, samplesPerSecond: 0 });
    const first = a.pushNow();
    a.report({ epoch: 1, samplesAccumulated: 2, samplesPerSecond: 0 });
    const second = a.pushNow();
    a.report({ epoch: 1, samplesAccumulated: 3, samplesPerSecond: 0 });
    const third = a.pushNow();
    while (received.length < 2) {
      await new Promise((resolve) => setImmediate(resolve));
      gates.shift()?.();
    }
    await Promise.all([first, second, third]);
    expect(maxInFlight).toBe(1);
    // one push, then one follow-up carrying the latest record
    expect(received).toEqual([1, 3]);
    expect(debug).toContain("progress push failed");
  });

  it("validates local reports and resets per-epoch metrics on a new epoch", async () => {
    const { trackers, network } = swarm(2, { targetBatchSize: 10 });
    const [a, b] = trackers as [ProgressTracker, ProgressTracker];
    expect(() => {
      a.report({ epoch: 1, samplesAccumulated: -1, samplesPerSecond: 0 });
    }).toThrow(expect.objectContaining({ code: "MALFORMED_MESSAGE" }));
    a.report({
      epoch: 1,
      samplesAccumulated: 4,
      samplesPerSecond: 2,
      lossSum: 3,
      minibatches: 2,
      bytesAggregated: 9,
    });
    // The mode is the tracker's at each report unless the report names one.
    a.report({ epoch: 1, samplesAccumulated: 6, samplesPerSecond: 2, mode: "client" });
    await a.pushNow();
    expect(b.records()[0]?.record).toEqual({
      epoch: 1,
      step: 1,
      samplesAccumulated: 6,
      samplesPerSecond: 2,
      lossSum: 3,
      minibatches: 2,
      bytesAggregated: 9,
      mode: "client",
      time: clock.now,
    });
    clock.now += 500;
    a.report({
      epoch: 2,
      samplesAccumulated: 0,
      samplesPerSecond: 2,
      samplesTotal: 6,
      computeSeconds: 1.5,
      previous: { epoch: 1, lossSum: 3, minibatches: 2 },
    });
    expect(a.snapshot()).toMatchObject({ epoch: 2, samplesAccumulated: 0, etaSeconds: 5, alivePeers: 1 });
    await a.pushNow();
    expect(b.records()[0]?.record).toMatchObject({
      epoch: 2,
      step: 2,
      lossSum: 0,
      minibatches: 0,
      bytesAggregated: 9,
      samplesTotal: 6,
      computeSeconds: 1.5,
      previous: { epoch: 1, lossSum: 3, minibatches: 2 },
    });
    // The next epoch's record says nothing about epoch 1 unless told; cumulative counters carry on.
    a.report({ epoch: 3, samplesAccumulated: 0, samplesPerSecond: 2, averagingEpoch: 2 });
    await a.pushNow();
    expect(b.records()[0]?.record.previous).toBeUndefined();
    expect(b.records()[0]?.record.samplesTotal).toBe(6);
    expect(b.records()[0]?.record.averagingEpoch).toBe(2);
    // A delayed round is in flight only while the trainer says so, even within the same epoch.
    a.report({ epoch: 3, samplesAccumulated: 4, samplesPerSecond: 2 });
    await a.pushNow();
    expect(b.records()[0]?.record).not.toHaveProperty("averagingEpoch");
    expect(() => new ProgressTracker({ rpc: network.add("c"), peers: () => [], targetBatchSize: 0 })).toThrow(
      expect.objectContaining({ code: "MALFORMED_MESSAGE" }),
    );
    const logger: ProgressLogger = pino({ level: "silent" });
    expect(typeof logger.debug).toBe("function");
  });

  it("stops serving and pushing after stop()", async () => {
    const { trackers, network } = swarm(2);
    const [a, b] = trackers as [ProgressTracker, ProgressTracker];
    a.stop();
    await expect(network.get("p1")?.request("p0", progressMethod, validRecord())).rejects.toMatchObject({
      code: "PEER_UNREACHABLE",
    });
    a.report({ epoch: 3, samplesAccumulated: 1, samplesPerSecond: 0 });
    await a.pushNow();
    expect(b.records()).toEqual([]);
  });
  it("in a swarm that publishes less often, holds back a prompt publish that comes too soon, then sends the latest", async () => {
    vi.useFakeTimers({ toFake: ["setInterval", "clearInterval", "setTimeout", "clearTimeout"] });
    // Two peers at a swarm-wide budget of 1 record/s: a 2 s period, prompt publishes 500 ms apart.
    const { trackers } = swarm(2, { recordsPerSecond: 1 });
    const [a, b] = trackers as [ProgressTracker, ProgressTracker];
    a.report({ epoch: 1, samplesAccumulated: 0, samplesPerSecond: 0 });
    b.report({ epoch: 1, samplesAccumulated: 0, samplesPerSecond: 0 });
    await settle();
    expect(a.records().map((r) => r.record.epoch)).toEqual([1]);
    expect(b.periodMs()).toBe(2000);
    b.report({ epoch: 2, samplesAccumulated: 0, samplesPerSecond: 0 });
    b.report({ epoch: 3, samplesAccumulated: 0, samplesPerSecond: 0, averagingEpoch: 2 });
    await settle();
    expect(a.records().map((r) => r.record.epoch)).toEqual([1]);
    clock.now += 500;
    await vi.advanceTimersByTimeAsync(500);
    await settle();
    expect(a.records().map((r) => r.record)).toMatchObject([{ epoch: 3, averagingEpoch: 2 }]);
    // The end of a round alone is worth a prompt publish too.
    clock.now += 500;
    b.report({ epoch: 3, samplesAccumulated: 1, samplesPerSecond: 0 });
    await settle();
    expect(a.records()[0]?.record).not.toHaveProperty("averagingEpoch");
  });

  it("in a small swarm, publishes every new epoch at once", async () => {
    const { trackers } = swarm(2);
    const [a, b] = trackers as [ProgressTracker, ProgressTracker];
    for (let epoch = 1; epoch <= 3; epoch++) {
      b.report({ epoch, samplesAccumulated: 0, samplesPerSecond: 0 });
      await settle();
      expect(a.records().map((r) => r.record.epoch)).toEqual([epoch]);
    }
  });

  it("publishes less often as the swarm grows, and keeps records alive for their sender's period", async () => {
    expect(publishPeriodMs(8, 1000, 16)).toBe(1000);
    expect(publishPeriodMs(64, 1000, 16)).toBe(4000);
    expect(publishPeriodMs(10_000, 1000, 16)).toBe(MAX_PERIOD_MS);
    const { trackers, pushAll } = swarm(5, { recordsPerSecond: 2 });
    trackers.forEach((t) => {
      t.report({ epoch: 1, samplesAccumulated: 1, samplesPerSecond: 1 });
    });
    await settle(); // a first report publishes at once
    const [a] = trackers as [ProgressTracker];
    expect(a.swarmSize()).toBe(5);
    expect(a.periodMs()).toBe(2500); // 5 peers at 2 records/s swarm-wide
    await pushAll(); // each record now names a 2.5 s period: alive for 3 × 2.5 s + 2 s
    clock.now += 9_000;
    expect(a.records()).toHaveLength(4);
    expect(a.snapshot()).toMatchObject({ alivePeers: 5, samplesAccumulated: 5 + 5 * 9 });
    clock.now += 501;
    expect(a.records()).toEqual([]);
    expect(a.swarmSize()).toBe(1);
  });

  it("counts a newcomer that has announced no samples yet as a contributor for a grace, then not until it does", async () => {
    const { network, trackers, pushAll } = swarm(3);
    const [a, newcomer, phantom] = trackers as [ProgressTracker, ProgressTracker, ProgressTracker];
    // Peers starting together: their first records have nothing accumulated yet.
    newcomer.report({ epoch: 0, samplesAccumulated: 0, samplesPerSecond: 0 });
    phantom.report({ epoch: 0, samplesAccumulated: 0, samplesPerSecond: 0 });
    await pushAll();
    expect(a.hasContributed("p1")).toBe(true);
    expect(a.hasContributed("p2")).toBe(true);
    clock.now += NEWCOMER_GRACE_MS / 2;
    newcomer.report({ epoch: 0, samplesAccumulated: 64, samplesPerSecond: 100 });
    phantom.report({ epoch: 0, samplesAccumulated: 0, samplesPerSecond: 0 });
    await pushAll();
    clock.now += NEWCOMER_GRACE_MS / 2;
    await pushAll();
    // The grace is over: the peer that announced samples counts, the key that announced none does not.
    expect(a.hasContributed("p1")).toBe(true);
    expect(a.hasContributed("p2")).toBe(false);
    expect(a.hasContributed("p9")).toBe(false);
    // A silent key does not buy another grace by naming a new session in its records.
    const silent = network.add("p9");
    await silent.request(
      "p0",
      progressMethod,
      validRecord({ epoch: 0, samplesAccumulated: 0, session: "one" }),
    );
    expect(a.hasContributed("p9")).toBe(true);
    clock.now += NEWCOMER_GRACE_MS;
    await silent.request(
      "p0",
      progressMethod,
      validRecord({ epoch: 0, samplesAccumulated: 0, session: "two" }),
    );
    expect(a.records().find((entry) => entry.peerId === "p9")?.record.session).toBe("two");
    expect(a.hasContributed("p9")).toBe(false);
  });

  it("waits for the record that announces a member's weight, and gives up after the wait", async () => {
    const { trackers, pushAll } = swarm(2);
    const [reducer, member] = trackers as [ProgressTracker, ProgressTracker];
    member.report({ epoch: 3, samplesAccumulated: 0, samplesPerSecond: 0 });
    await pushAll();
    expect(reducer.earnedWeight("p1", 3)).toBe(0);

    // The member's stream came first; the record announcing its round's 32 samples follows.
    const earned = reducer.awaitEarnedWeight("p1", 3, 32);
    clock.now += 1_000;
    member.report({ epoch: 3, samplesAccumulated: 32, samplesPerSecond: 0, averagingEpoch: 3 });
    await settle();
    expect(await earned).toBeGreaterThanOrEqual(32);

    // No record earns 1000 samples: the reducer is told what was earned once the wait ran out.
    const started = performance.now();
    const unearned = await reducer.awaitEarnedWeight("p1", 3, 1_000, undefined, 50);
    expect(unearned).toBeLessThan(1_000);
    expect(performance.now() - started).toBeGreaterThanOrEqual(45);
  });
});
