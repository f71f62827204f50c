import type { ProgressRecord } from "@barnraise/swarm";
import { describe, expect, it } from "vitest";
import { HELPING_WINDOW_MS, RoundWitness } from "../../src/monitor/round-witness.ts";
import { SessionCredit, type CreditTally } from "../../src/monitor/session-credit.ts";

/** A trainer's record at `epoch` whose latest finished round is `round`, with contributed `total`. */
function record(epoch: number, total: number, round?: number): ProgressRecord {
  return {
    epoch,
    samplesAccumulated: 0,
    samplesPerSecond: 100,
    time: 0,
    mode: "node",
    lossSum: 0,
    minibatches: 0,
    step: epoch,
    bytesAggregated: 0,
    samplesTotal: total,
    ...(round === undefined ? {} : { round: { epoch: round, bytesSent: 1 } }),
  };
}

function setup() {
  const clock = { now: 1_000_000 };
  const witness = new RoundWitness(() => clock.now);
  const tally: CreditTally = { witnessed: 0, unwitnessed: 0, cut: 0 };
  /** The aux reduced a part of round `epoch` (group `groupId`) and accepted these weights. */
  const round = (epoch: number, weights: Record<string, number>, groupId = `g${epoch}`) => {
    for (const [peerId, weight] of Object.entries(weights))
      witness.observe({ epoch, groupId, peerId, weight });
  };
  return { clock, witness, tally, round };
}

describe("SessionCredit", () => {
  it("credits an honest trainer exactly what it put into the rounds, in either order of its records", () => {
    const { clock, witness, tally, round } = setup();
    const credit = new SessionCredit("a", record(3, 1_000), clock.now);
    round(3, { a: 256, b: 300 });
    // The trainer publishes its new total first, then names the round (two records per step).
    credit.observe(record(3, 1_256));
    credit.observe(record(3, 1_256, 3));
    round(4, { a: 200, b: 300 });
    // …or both at once.
    credit.observe(record(5, 1_456, 4));
    expect(credit.settle(witness, tally)).toEqual([]);
    expect(credit.samples).toBe(1_456);
    expect(tally).toEqual({ witnessed: 456, unwitnessed: 0, cut: 0 });
  });

  it("cuts a total that grew by more than the aux accepted, and says by how much", () => {
    const { clock, witness, tally, round } = setup();
    const credit = new SessionCredit("m", record(0, 0), clock.now);
    round(0, { m: 256, b: 256 });
    round(1, { m: 256, b: 256 });
    credit.observe(record(2, 640, 1));
    expect(credit.settle(witness, tally)).toEqual([{ claimed: 640, witnessed: 512, from: 0, to: 1 }]);
    expect(credit.samples).toBe(512);
    expect(tally).toEqual({ witnessed: 512, unwitnessed: 0, cut: 128 });
  });

  it("credits nothing for a round the trainer was not in, though it names the round and claims its samples", () => {
    const { clock, witness, tally, round } = setup();
    const credit = new SessionCredit("free-rider", record(5, 0), clock.now);
    round(5, { a: 256, b: 256 });
    credit.observe(record(6, 256, 5));
    expect(credit.settle(witness, tally)).toHaveLength(1);
    expect(credit.samples).toBe(0);
  });

  it("credits a round once however often a trainer names it again", () => {
    const { clock, witness, tally, round } = setup();
    const credit = new SessionCredit("m", record(10, 0), clock.now);
    round(10, { m: 100 });
    round(11, { m: 100 });
    // Back and forth between two witnessed rounds, the total growing each time.
    credit.observe(record(12, 100, 10));
    credit.observe(record(12, 200, 11));
    credit.observe(record(12, 300, 10));
    credit.observe(record(12, 400, 11));
    credit.settle(witness, tally);
    expect(credit.samples).toBe(200);
  });

  it("credits as claimed a round the aux did not take part in, and holds back one it is yet to see", () => {
    const { clock, witness, tally, round } = setup();
    const credit = new SessionCredit("a", record(0, 0), clock.now);
    round(0, { a: 100 });
    // Round 1 failed for the aux: the trainers retried it without it.
    round(1, { a: 100 });
    witness.failed(1);
    round(2, { a: 100 });
    credit.observe(record(2, 100, 0));
    credit.observe(record(2, 230, 1));
    credit.observe(record(3, 330, 2));
    // A round ahead of what the aux has seen waits while the aux is helping.
    credit.observe(record(4, 10_330, 3));
    expect(credit.settle(witness, tally)).toEqual([]);
    expect(credit.samples).toBe(330);
    expect(tally).toEqual({ witnessed: 200, unwitnessed: 130, cut: 0 });
    // The aux's round 3 without the trainer: the claim is cut to nothing.
    round(3, { b: 100 });
    expect(credit.settle(witness, tally)).toEqual([{ claimed: 10_000, witnessed: 0, from: 3, to: 3 }]);
    expect(credit.samples).toBe(330);
    // An aux that stopped helping witnesses nothing: the next claim is taken as the records allow.
    credit.observe(record(5, 10_430, 4));
    expect(credit.settle(witness, tally)).toEqual([]);
    expect(credit.samples).toBe(330);
    clock.now += HELPING_WINDOW_MS + 1;
    credit.settle(witness, tally);
    expect(credit.samples).toBe(430);
  });

  it("cannot check a growth over more rounds than the witness keeps", () => {
    const { clock, witness, tally, round } = setup();
    const credit = new SessionCredit("a", record(0, 0), clock.now);
    round(299, { a: 10 });
    round(300, { a: 10 });
    // Silent for 300 rounds (a long stall): most of them are older than what the aux keeps.
    credit.observe(record(301, 5_000, 300));
    expect(credit.settle(witness, tally)).toEqual([]);
    expect(credit.samples).toBe(5_000);
  });

  it("takes a session's first total as it comes, and credits a resumed swarm's repeated round anew", () => {
    const { clock, witness, tally, round } = setup();
    const credit = new SessionCredit("a", record(177, 5_000, 176), clock.now);
    expect(credit.samples).toBe(5_000);
    // The swarm resumed from a checkpoint of step 150 and averages epoch 150 again, in a new group.
    round(150, { a: 90 }, "after-resume");
    credit.observe(record(151, 5_090, 150));
    credit.settle(witness, tally);
    expect(credit.samples).toBe(5_090);
  });

  it("does not hold a restarted trainer to the round of an epoch its last session was in", () => {
    const { clock, witness, tally, round } = setup();
    round(662, { a: 832, b: 900 });
    // `a` restarts; the swarm goes back to the state of step 650 and averages 662 again, without the aux.
    clock.now += 10_000;
    const restarted = new SessionCredit("a", record(662, 0), clock.now);
    // The new session cannot have been in a round that began before it: its round of epoch 662 went
    // unwitnessed, and is credited as claimed (not the first session's weight, nor nothing).
    restarted.observe(record(663, 896, 662));
    expect(restarted.settle(witness, tally)).toEqual([]);
    expect(restarted.samples).toBe(896);
    // A session the aux knew before: once the aux knows the swarm went back, the epochs from there
    // on are unwitnessed until it sees them again.
    const again = new SessionCredit("b", record(640, 0), clock.now - 60_000);
    witness.forgetFrom(650);
    again.observe(record(663, 896, 662));
    // The redone rounds wait for the aux, which helps them again…
    expect(again.settle(witness, tally)).toEqual([]);
    expect(again.samples).toBe(0);
    // …and joined the swarm's round of 663: the round of 662 went without it.
    round(663, { b: 700 }, "with-the-aux");
    expect(again.settle(witness, tally)).toEqual([]);
    expect(again.samples).toBe(896);
    again.observe(record(664, 1_596, 663));
    again.settle(witness, tally);
    expect(again.samples).toBe(1_596);
  });
});

describe("RoundWitness", () => {
  it("tells witnessed, absent, pending and unwitnessed rounds apart", () => {
    const { clock, witness, round } = setup();
    round(300, { a: 10 });
    expect(witness.status(300, "a")).toEqual({ kind: "witnessed", weight: 10, round: "300/g300" });
    expect(witness.status(300, "b")).toEqual({ kind: "absent" });
    expect(witness.status(299, "a")).toEqual({ kind: "unwitnessed" });
    expect(witness.status(301, "a")).toEqual({ kind: "pending" });
    clock.now += HELPING_WINDOW_MS + 1;
    expect(witness.status(301, "a")).toEqual({ kind: "unwitnessed" });
    // A retry of the epoch replaces its first round.
    round(300, { a: 12 }, "retry");
    expect(witness.status(300, "a")).toEqual({ kind: "witnessed", weight: 12, round: "300/retry" });
    // Rounds far behind the latest are not kept.
    round(1_000, { a: 1 });
    expect(witness.status(300, "a")).toEqual({ kind: "unwitnessed" });
  });

  it("waits for the rounds of a swarm that went back, however far, and sees them again", () => {
    const { witness, round } = setup();
    round(1_400, { a: 10 });
    // The organizer rolled the run back to step 400: the aux is told, and its helper joins again.
    witness.forgetFrom(400);
    expect(witness.status(400, "a")).toEqual({ kind: "pending" });
    expect(witness.status(1_400, "a")).toEqual({ kind: "pending" });
    round(400, { a: 7 });
    expect(witness.status(400, "a")).toEqual({ kind: "witnessed", weight: 7, round: "400/g400" });
    // Not told: a round it joins far behind the latest it saw says the swarm went back.
    round(2_000, { a: 1 });
    round(1_500, { a: 5 });
    expect(witness.status(1_500, "a")).toMatchObject({ kind: "witnessed", weight: 5 });
    expect(witness.status(2_000, "a")).toEqual({ kind: "pending" });
  });
});
