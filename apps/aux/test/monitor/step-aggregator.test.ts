import type { PeerProgressRecord, ProgressRecord } from "@barnraise/swarm";
import { describe, expect, it } from "vitest";
import { RoundWitness } from "../../src/monitor/round-witness.ts";
import { StepAggregator, type StepAggregatorOptions } from "../../src/monitor/step-aggregator.ts";

const TTL = 5000;
const GRACE = 2000;

/** A fake clock and an aggregator that reads it; records are received at the clock's time. */
function setup(options: Partial<StepAggregatorOptions> = {}) {
  const clock = { now: 1_700_000_000_000 };
  const aggregator = new StepAggregator({ ttlMs: TTL, graceMs: GRACE, now: () => clock.now, ...options });
  const push = (peerId: string, fields: Partial<ProgressRecord> & Pick<ProgressRecord, "epoch">): void => {
    const record: ProgressRecord = {
      samplesAccumulated: 0,
      samplesPerSecond: 10,
      time: clock.now,
      mode: "node",
      lossSum: 0,
      minibatches: 0,
      step: fields.epoch,
      bytesAggregated: 0,
      ...fields,
    };
    const update: PeerProgressRecord = {
      peerId,
      username: `user-${peerId}`,
      role: record.mode === "aux" ? "aux" : "trainer",
      record,
      receivedAt: clock.now,
    };
    aggregator.observe(update);
  };
  const advance = (ms: number): void => {
    clock.now += ms;
  };
  return { aggregator, clock, push, advance };
}

describe("StepAggregator", () => {
  it("computes the loss as Σ lossSum / Σ minibatches across peers with different minibatch counts", () => {
    const { aggregator, push, advance } = setup();
    push("a", { epoch: 3, lossSum: 6, minibatches: 2 });
    push("b", { epoch: 3, lossSum: 1, minibatches: 1 });
    push("c", { epoch: 3, lossSum: 21, minibatches: 7 });
    push("a", { epoch: 4, previous: { epoch: 3, lossSum: 6, minibatches: 2 } });
    advance(GRACE);
    push("b", { epoch: 4, previous: { epoch: 3, lossSum: 1, minibatches: 1 } });
    push("c", { epoch: 4, previous: { epoch: 3, lossSum: 21, minibatches: 7 } });
    const [step, ...rest] = aggregator.collect();
    expect(rest).toEqual([]);
    // (6 + 1 + 21) / (2 + 1 + 7) = 2.8, not the mean of the peers' means (3 + 1 + 3) / 3.
    expect(step?.step).toBe(4);
    expect(step?.loss).toBeCloseTo(2.8, 12);
    expect(aggregator.latestLoss()).toBeCloseTo(2.8, 12);
    expect(step?.alivePeers).toBe(3);
    expect(step?.samplesPerSecond).toBe(30);
  });

  it("reports the step's mean bytes sent per trainer and the trainers' compute share of wall time", () => {
    const { aggregator, push, advance } = setup();
    // Records of the epoch itself carry the cumulative compute time, which must not count as the epoch's.
    push("a", { epoch: 3, lossSum: 2, minibatches: 1, computeSeconds: 500 });
    push("b", { epoch: 3, lossSum: 2, minibatches: 1, computeSeconds: 700 });
    push("aux", { epoch: 3, mode: "aux", bytesAggregated: 10 });
    push("a", {
      epoch: 4,
      computeSeconds: 504,
      previous: { epoch: 3, lossSum: 2, minibatches: 1, computeSeconds: 3, wallSeconds: 4 },
    });
    // b's round ended later (a delayed round): its bytes come in a record of the next epoch.
    push("b", {
      epoch: 4,
      previous: { epoch: 3, lossSum: 2, minibatches: 1, computeSeconds: 1.5, wallSeconds: 2 },
    });
    push("a", { epoch: 4, round: { epoch: 3, bytesSent: 1000 } });
    push("b", { epoch: 4, round: { epoch: 3, bytesSent: 3000 } });
    // The aux's own record does not count.
    push("aux", { epoch: 4, mode: "aux", round: { epoch: 3, bytesSent: 99 } });
    advance(GRACE);
    push("a", { epoch: 4, lossSum: 1, minibatches: 1 });
    const [step] = aggregator.collect();
    expect(step?.step).toBe(4);
    expect(step?.bytesPerPeer).toBe(2000);
    expect(step?.utilization).toBeCloseTo(4.5 / 6, 12);
  });

  it("leaves traffic and utilization out when no trainer said them", () => {
    const { aggregator, push, advance } = setup();
    push("a", { epoch: 3, lossSum: 2, minibatches: 1 });
    push("a", { epoch: 4, previous: { epoch: 3, lossSum: 2, minibatches: 1 } });
    advance(GRACE);
    push("a", { epoch: 4 });
    const [step] = aggregator.collect();
    expect(step?.step).toBe(4);
    expect(step).not.toHaveProperty("bytesPerPeer");
    expect(step).not.toHaveProperty("utilization");
    expect(step).not.toHaveProperty("samples");
  });

  it("takes an epoch's final totals from `previous` when the epoch ended between two pushes", () => {
    const { aggregator, push, advance } = setup();
    push("a", { epoch: 3, lossSum: 2, minibatches: 1 });
    push("b", { epoch: 3, lossSum: 4, minibatches: 1 });
    advance(1000);
    // Both finished epoch 3 with more minibatches than their last epoch-3 records showed.
    push("a", { epoch: 4, lossSum: 100, minibatches: 1, previous: { epoch: 3, lossSum: 9, minibatches: 3 } });
    push("b", {
      epoch: 4,
      lossSum: 100,
      minibatches: 1,
      previous: { epoch: 3, lossSum: 12, minibatches: 3 },
    });
    // A late, smaller record for epoch 3 does not replace the larger totals.
    push("b", { epoch: 3, lossSum: 4, minibatches: 1 });
    advance(GRACE);
    push("b", { epoch: 4, lossSum: 100, minibatches: 1 });
    expect(aggregator.collect().map(({ step, loss }) => ({ step, loss }))).toEqual([{ step: 4, loss: 3.5 }]);
  });

  it("waits graceMs after the first record of a later epoch, then emits each step exactly once", () => {
    const { aggregator, clock, push, advance } = setup();
    push("a", { epoch: 3, lossSum: 2, minibatches: 1 });
    push("b", { epoch: 3, lossSum: 2, minibatches: 1 });
    expect(aggregator.collect()).toEqual([]);
    push("a", { epoch: 4, previous: { epoch: 3, lossSum: 2, minibatches: 1 } });
    expect(aggregator.collect()).toEqual([]);
    advance(GRACE - 1);
    expect(aggregator.collect()).toEqual([]);
    // b's totals arrive inside the grace period and count.
    push("b", { epoch: 4, previous: { epoch: 3, lossSum: 8, minibatches: 2 } });
    advance(1);
    const steps = aggregator.collect();
    expect(steps.map(({ step, loss }) => ({ step, loss }))).toEqual([{ step: 4, loss: 10 / 3 }]);
    expect(steps[0]?.time).toBe(clock.now);
    expect(aggregator.collect()).toEqual([]);
    // Later records for the emitted epoch change nothing.
    push("a", { epoch: 4, previous: { epoch: 3, lossSum: 50, minibatches: 9 } });
    advance(GRACE);
    expect(aggregator.collect()).toEqual([]);
    expect(aggregator.currentStep()).toBe(4);
  });

  it("ignores aux records for loss, epochs and alive peers but lists them in peers", () => {
    const { aggregator, push, advance } = setup();
    aggregator.setOwnContribution({
      peerId: "self",
      samples: 0,
      computeSeconds: 0,
      bytesAggregated: 77,
      sessionSeconds: 9,
    });
    push("x", { epoch: 9, mode: "aux", lossSum: 1000, minibatches: 1, bytesAggregated: 5000 });
    push("a", { epoch: 3, lossSum: 2, minibatches: 1, samplesTotal: 40, computeSeconds: 3.5 });
    advance(1000);
    push("x", {
      epoch: 10,
      mode: "aux",
      bytesAggregated: 5000,
      previous: { epoch: 3, lossSum: 1000, minibatches: 1 },
    });
    expect(aggregator.currentStep()).toBe(3);
    push("a", { epoch: 4, previous: { epoch: 3, lossSum: 2, minibatches: 1 } });
    advance(GRACE);
    push("a", { epoch: 4 });
    const [step] = aggregator.collect();
    expect(step?.step).toBe(4);
    expect(step?.loss).toBe(2);
    expect(step?.alivePeers).toBe(1);
    expect(step?.samplesPerSecond).toBe(10);
    expect(step?.peers).toEqual([
      { peerId: "a", samples: 0, computeSeconds: 0, bytesAggregated: 0, sessionSeconds: 3, averaging: true },
      { peerId: "self", samples: 0, computeSeconds: 0, bytesAggregated: 77, sessionSeconds: 9 },
      { peerId: "x", samples: 0, computeSeconds: 0, bytesAggregated: 5000, sessionSeconds: 3 },
    ]);
  });

  it("reports samplesTotal and computeSeconds of the latest record", () => {
    const { aggregator, push, advance } = setup();
    push("a", { epoch: 3, lossSum: 2, minibatches: 1, samplesTotal: 40, computeSeconds: 3.5 });
    push("a", { epoch: 4, previous: { epoch: 3, lossSum: 2, minibatches: 1 }, samplesTotal: 64 });
    advance(GRACE);
    push("a", { epoch: 4, samplesTotal: 80, computeSeconds: 6, bytesAggregated: 123 });
    expect(aggregator.collect()[0]?.peers).toEqual([
      {
        peerId: "a",
        samples: 80,
        computeSeconds: 6,
        bytesAggregated: 123,
        sessionSeconds: 2,
        averaging: true,
      },
    ]);
  });

  it("does not count a trainer whose contributed samples stopped growing as alive, and reports it as not averaging", () => {
    const { aggregator, push, advance } = setup({ averagingWindowMs: 60_000 });
    // Records arrive every second, as peers publish them; `a` and `b` are their samplesTotal.
    const both = (seconds: number, a: number, b: number): void => {
      for (let k = 0; k < seconds; k++) {
        advance(1000);
        push("a", { epoch: 1, samplesTotal: a });
        push("b", { epoch: 1, samplesTotal: b });
      }
    };
    const verdicts = () => new Map(aggregator.contributions().map((peer) => [peer.peerId, peer.averaging]));
    both(30, 0, 0);
    both(1, 32, 0);
    // b is too new to tell: given the benefit of the doubt.
    expect(aggregator.liveness().alivePeers).toBe(2);
    expect(verdicts()).toEqual(
      new Map([
        ["a", true],
        ["b", undefined],
      ]),
    );
    both(40, 32, 0); // a contributed 40 s ago; b has trained for 71 s and put nothing into a step
    expect(aggregator.liveness()).toEqual({ alivePeers: 1, samplesPerSecond: 20 });
    expect(verdicts()).toEqual(
      new Map([
        ["a", true],
        ["b", false],
      ]),
    );
    both(25, 32, 16); // b's first shared step; a's last is 65 s old
    expect(verdicts()).toEqual(
      new Map([
        ["a", false],
        ["b", true],
      ]),
    );
    // A restarted session starts with the benefit of the doubt again.
    push("a", { epoch: 1, samplesTotal: 0, session: "second" });
    expect(verdicts().get("a")).toBeUndefined();
  });

  it("widens the averaging window to three recent step intervals on a slow swarm", () => {
    const { aggregator, push, advance } = setup({ averagingWindowMs: 60_000 });
    const both = (seconds: number, epoch: number, a: number, b: number): void => {
      for (let k = 0; k < seconds; k++) {
        advance(1000);
        push("a", { epoch, samplesTotal: a });
        push("b", { epoch, samplesTotal: b });
      }
    };
    // Steps every 50 s; both put samples into each.
    for (let epoch = 1; epoch <= 4; epoch++) both(50, epoch, 32 * epoch, 32 * epoch);
    // Then nobody's total grows (the last grew when epoch 4 began, 50 s ago): not averaging only
    // after 3 × 50 s, not after 60 s.
    both(98, 4, 128, 128);
    expect(aggregator.liveness().alivePeers).toBe(2);
    both(4, 4, 128, 128);
    expect(aggregator.liveness().alivePeers).toBe(0);
  });

  it("does not count stale peers as alive, in samples/s or in peers", () => {
    const { aggregator, push, advance } = setup();
    push("a", { epoch: 3, lossSum: 2, minibatches: 1 });
    push("gone", { epoch: 3, lossSum: 4, minibatches: 1, samplesPerSecond: 500 });
    advance(TTL - 1000);
    push("a", { epoch: 4, previous: { epoch: 3, lossSum: 2, minibatches: 1 } });
    advance(GRACE);
    const [step] = aggregator.collect();
    // The stale peer's totals for epoch 3 still count: it did that work.
    expect(step?.loss).toBe(3);
    expect(step?.alivePeers).toBe(1);
    expect(step?.samplesPerSecond).toBe(10);
    expect(step?.peers.map((peer) => peer.peerId)).toEqual(["a"]);
  });

  it("does not finalize on the word of a peer that went stale before collect", () => {
    const { aggregator, push, advance } = setup();
    push("a", { epoch: 3, lossSum: 2, minibatches: 1 });
    push("b", { epoch: 4, previous: { epoch: 3, lossSum: 2, minibatches: 1 } });
    advance(TTL + 1);
    push("a", { epoch: 3, lossSum: 4, minibatches: 2 });
    expect(aggregator.currentStep()).toBe(3);
    expect(aggregator.collect()).toEqual([]);
  });

  it("restarts a peer's session after a gap longer than ttlMs", () => {
    const { aggregator, push, advance } = setup();
    push("a", { epoch: 3, lossSum: 2, minibatches: 1 });
    advance(TTL);
    push("a", { epoch: 3, lossSum: 2, minibatches: 1 });
    advance(TTL);
    push("a", { epoch: 4, previous: { epoch: 3, lossSum: 2, minibatches: 1 } });
    advance(GRACE);
    push("a", { epoch: 4 });
    expect(aggregator.collect()[0]?.peers[0]?.sessionSeconds).toBe((2 * TTL + GRACE) / 1000);

    advance(TTL + 1);
    push("a", { epoch: 5, previous: { epoch: 4, lossSum: 2, minibatches: 1 } });
    advance(GRACE);
    push("a", { epoch: 5 });
    expect(aggregator.collect()[0]?.peers[0]?.sessionSeconds).toBe(GRACE / 1000);
  });

  it("emits each epoch with data on a jump, in ascending order, and skips epochs without minibatches", () => {
    const { aggregator, push, advance } = setup();
    push("a", { epoch: 5, lossSum: 5, minibatches: 1 });
    push("b", { epoch: 6, lossSum: 0, minibatches: 0 });
    push("b", { epoch: 8, previous: { epoch: 7, lossSum: 14, minibatches: 2 } });
    advance(GRACE);
    push("b", { epoch: 8 });
    const steps = aggregator.collect();
    expect(steps.map(({ step, loss }) => ({ step, loss }))).toEqual([
      { step: 6, loss: 5 },
      { step: 8, loss: 7 },
    ]);
    expect(aggregator.latestLoss()).toBe(7);
    // Epoch 6 is done although it had no data: late totals for it are ignored.
    push("a", { epoch: 8, previous: { epoch: 6, lossSum: 3, minibatches: 1 } });
    push("a", { epoch: 9, previous: { epoch: 8, lossSum: 1, minibatches: 1 } });
    advance(GRACE);
    push("a", { epoch: 9 });
    expect(aggregator.collect().map(({ step }) => step)).toEqual([9]);
  });

  it("never emits epochs older than the first one observed", () => {
    const { aggregator, push, advance } = setup();
    push("a", { epoch: 5, lossSum: 5, minibatches: 1, previous: { epoch: 4, lossSum: 4, minibatches: 1 } });
    push("b", { epoch: 4, lossSum: 4, minibatches: 1 });
    advance(GRACE);
    push("a", { epoch: 6, previous: { epoch: 5, lossSum: 5, minibatches: 1 } });
    advance(GRACE);
    push("a", { epoch: 6 });
    expect(aggregator.collect().map(({ step }) => step)).toEqual([6]);
  });

  it("keeps loss totals for at most maxEpochsKept epochs and marks the dropped ones done", () => {
    const { aggregator, push, advance } = setup({ maxEpochsKept: 3 });
    for (let epoch = 1; epoch <= 6; epoch++) push(`p${epoch}`, { epoch, lossSum: epoch, minibatches: 1 });
    push("p6", { epoch: 7, previous: { epoch: 6, lossSum: 6, minibatches: 1 } });
    advance(GRACE);
    push("p6", { epoch: 7 });
    // Epochs 1 to 3 were dropped to stay at 3 epochs; 4 to 6 remain.
    expect(aggregator.collect().map(({ step }) => step)).toEqual([5, 6, 7]);
  });

  it("rejects invalid options", () => {
    expect(() => new StepAggregator({ ttlMs: 0, graceMs: 0 })).toThrow(/ttlMs/);
    expect(() => new StepAggregator({ ttlMs: 1, graceMs: -1 })).toThrow(/graceMs/);
    expect(() => new StepAggregator({ ttlMs: 1, graceMs: 0, maxEpochsKept: 0.5 })).toThrow(/maxEpochsKept/);
  });
});

describe("StepAggregator.trainers", () => {
  const sorted = <T extends { peerId: string }>(trainers: T[]) =>
    [...trainers].sort((a, b) => (a.peerId < b.peerId ? -1 : 1));

  it("lists the fresh trainers with their averaging verdicts, and no aux peer", () => {
    const { aggregator, push, advance } = setup({ averagingWindowMs: 60_000 });
    expect(aggregator.trainers()).toEqual([]);
    // a puts samples into a step at once; b trains for 61 s and puts none; c arrives late.
    push("a", { epoch: 1, samplesTotal: 0 });
    push("b", { epoch: 1, samplesTotal: 0 });
    push("x", { epoch: 1, mode: "aux", bytesAggregated: 100 });
    for (let second = 1; second <= 61; second++) {
      advance(1000);
      push("a", { epoch: 1, samplesTotal: 32 });
      push("b", { epoch: 1, samplesTotal: 0 });
      push("x", { epoch: 1, mode: "aux", bytesAggregated: 100 + second });
    }
    push("c", { epoch: 1, samplesTotal: 0 });
    const trainers = sorted(aggregator.trainers());
    expect(trainers).toEqual([
      { peerId: "a", averaging: true },
      { peerId: "b", averaging: false },
      { peerId: "c" },
    ]);
    // Too new to tell: no verdict at all, not one that says undefined.
    expect(trainers[2]).not.toHaveProperty("averaging");
    // A trainer that is not averaging is still listed (it is in the swarm), but not counted alive.
    expect(aggregator.liveness().alivePeers).toBe(2);
  });

  it("lists a paused trainer with why, and counts it neither alive nor in the swarm's throughput", () => {
    const { aggregator, push } = setup();
    push("a", { epoch: 2, samplesPerSecond: 30 });
    push("b", { epoch: 2, samplesPerSecond: 20, paused: ["in-use", "battery"] });
    expect(sorted(aggregator.trainers())).toEqual([
      { peerId: "a" },
      { peerId: "b", paused: ["in-use", "battery"] },
    ]);
    expect(aggregator.liveness()).toEqual({ alivePeers: 1, samplesPerSecond: 30 });
    // Training again: counted again, and no reasons left.
    push("b", { epoch: 2, samplesPerSecond: 20 });
    expect(sorted(aggregator.trainers())).toEqual([{ peerId: "a" }, { peerId: "b" }]);
    expect(aggregator.liveness()).toEqual({ alivePeers: 2, samplesPerSecond: 50 });
  });

  it("leaves out a trainer whose record is older than ttlMs, and keeps one exactly ttlMs old", () => {
    const { aggregator, push, advance } = setup();
    push("a", { epoch: 3 });
    advance(1000);
    push("b", { epoch: 3 });
    advance(TTL - 1000);
    expect(sorted(aggregator.trainers()).map((trainer) => trainer.peerId)).toEqual(["a", "b"]);
    advance(1);
    expect(aggregator.trainers().map((trainer) => trainer.peerId)).toEqual(["b"]);
    advance(1000);
    expect(aggregator.trainers()).toEqual([]);
    // Heard from again: listed again.
    push("a", { epoch: 4 });
    expect(aggregator.trainers().map((trainer) => trainer.peerId)).toEqual(["a"]);
  });

  it("lists only trainers of the current generation, and follows a reset", () => {
    const { aggregator, push } = setup();
    push("a", { epoch: 3 });
    push("b", { epoch: 3, generation: 1 });
    expect(aggregator.trainers().map((trainer) => trainer.peerId)).toEqual(["a"]);
    aggregator.reset(1);
    expect(aggregator.trainers().map((trainer) => trainer.peerId)).toEqual(["b"]);
    push("a", { epoch: 1, generation: 1 });
    expect(sorted(aggregator.trainers()).map((trainer) => trainer.peerId)).toEqual(["a", "b"]);
  });

  it("lists each trainer once, however many records it sent, and a trainer that turned aux not at all", () => {
    const { aggregator, push } = setup();
    for (let epoch = 1; epoch <= 5; epoch++) {
      push("a", { epoch });
      push("b", { epoch });
    }
    push("b", { epoch: 5, mode: "aux" });
    expect(aggregator.trainers().map((trainer) => trainer.peerId)).toEqual(["a"]);
  });

  it("with a witness, credits each trainer what the aux accepted of its samples, and names who claimed more", () => {
    const witness = new RoundWitness();
    const { aggregator, push, advance } = setup({ witness });
    const round = (epoch: number, weights: Record<string, number>) => {
      for (const [peerId, weight] of Object.entries(weights)) {
        witness.observe({ epoch, groupId: `g${epoch}`, peerId, weight });
      }
    };
    push("a", { epoch: 0, samplesTotal: 0, session: "s" });
    push("m", { epoch: 0, samplesTotal: 0, session: "s" });
    round(0, { a: 300, m: 100 });
    push("a", { epoch: 1, samplesTotal: 300, round: { epoch: 0, bytesSent: 1 }, session: "s" });
    push("m", { epoch: 1, samplesTotal: 500, round: { epoch: 0, bytesSent: 1 }, session: "s" });
    const samples = () =>
      Object.fromEntries(aggregator.contributions().map((peer) => [peer.peerId, peer.samples]));
    expect(samples()).toEqual({ a: 300, m: 100 });
    expect(aggregator.takeShortfalls()).toEqual([
      { peerId: "m", claimed: 500, witnessed: 100, from: 0, to: 0 },
    ]);
    expect(aggregator.takeShortfalls()).toEqual([]);
    expect(aggregator.creditTally()).toEqual({ witnessed: 400, unwitnessed: 0, cut: 400 });
    // Silent for longer than a record lives, the same session goes on from its checked credit.
    advance(3 * TTL);
    round(1, { a: 300, m: 100 });
    push("m", { epoch: 2, samplesTotal: 600, round: { epoch: 1, bytesSent: 1 }, session: "s" });
    expect(samples()).toEqual({ m: 200 });
  });

  it("with a witness, reports the samples the aux accepted into each step's round, and none for a round it did not keep", () => {
    const witness = new RoundWitness();
    const { aggregator, push, advance } = setup({ witness });
    witness.observe({ epoch: 3, groupId: "g3", peerId: "a", weight: 300 });
    witness.observe({ epoch: 3, groupId: "g3", peerId: "b", weight: 120 });
    // The round of epoch 4 failed for the aux: the trainers' retry is unwitnessed.
    witness.observe({ epoch: 4, groupId: "g4", peerId: "a", weight: 200 });
    witness.failed(4);
    push("a", { epoch: 3, lossSum: 2, minibatches: 1 });
    push("b", { epoch: 3, lossSum: 2, minibatches: 1 });
    push("a", { epoch: 4, lossSum: 2, minibatches: 1 });
    push("a", { epoch: 5, lossSum: 2, minibatches: 1 });
    advance(GRACE);
    push("a", { epoch: 5, lossSum: 2, minibatches: 1 });
    const steps = aggregator.collect();
    expect(steps.map((step) => step.step)).toEqual([4, 5]);
    expect(steps[0]?.samples).toBe(420);
    expect(steps[1]).not.toHaveProperty("samples");
  });

  it("without a witness, credits a trainer's reported total", () => {
    const { aggregator, push } = setup();
    push("m", { epoch: 1, samplesTotal: 500, round: { epoch: 0, bytesSent: 1 } });
    expect(aggregator.contributions()).toMatchObject([{ peerId: "m", samples: 500 }]);
    expect(aggregator.creditTally()).toEqual({ witnessed: 0, unwitnessed: 0, cut: 0 });
  });
});
