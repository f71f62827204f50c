import type { PeerProgressRecord, ProgressRecord } from "@barnraise/swarm";
import { describe, expect, it } from "vitest";
import { SplitWatch, type SplitWatchOptions } from "../../src/monitor/split-watch.ts";

const TTL = 5000;
const BASE58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";

/** A PeerId-like name; names sort in index order, as the watch sorts PeerIds. */
function peer(index: number): string {
  return `12D3KooW${"z".repeat(42)}${BASE58.charAt(Math.floor(index / 58))}${BASE58.charAt(index % 58)}`;
}

const [A, B, C, D, E, F] = [peer(0), peer(1), peer(2), peer(3), peer(4), peer(5)];
/** An aux peer's id. */
const X = peer(57);

/** How the summary names a trainer: its first 8 and last 6 characters. */
function short(peerId: string): string {
  return `…${peerId.slice(-10)}`;
}

/** A 16-hex-digit digest made of one repeated digit. */
function digest(hex: string): string {
  return hex.repeat(16);
}

interface Fields {
  /** The epoch the trainer is at (and, unless `hashEpoch` says otherwise, its digest's epoch). */
  readonly epoch: number;
  /** Its state digest at `hashEpoch`; no stateHash when absent. */
  readonly digest?: string;
  readonly hashEpoch?: number;
  readonly soloSteps?: number;
  readonly generation?: number;
  readonly mode?: ProgressRecord["mode"];
}

/** A fake clock, the exactness switch and a watch that reads both; records are received at the clock's time. */
function setup(options: Partial<SplitWatchOptions> = {}) {
  const clock = { now: 1_700_000_000_000 };
  const exact = { value: true };
  const watch = new SplitWatch({ ttlMs: TTL, exact: () => exact.value, now: () => clock.now, ...options });
  const push = (peerId: string, fields: Fields): void => {
    const mode = fields.mode ?? "node";
    const record: ProgressRecord = {
      epoch: fields.epoch,
      samplesAccumulated: 0,
      samplesPerSecond: mode === "aux" ? 0 : 10,
      time: clock.now,
      mode,
      lossSum: 0,
      minibatches: 0,
      step: fields.epoch,
      bytesAggregated: 0,
      ...(fields.digest === undefined
        ? {}
        : { stateHash: { epoch: fields.hashEpoch ?? fields.epoch, digest: fields.digest } }),
      ...(fields.soloSteps === undefined ? {} : { soloSteps: fields.soloSteps }),
      ...(fields.generation === undefined ? {} : { generation: fields.generation }),
    };
    const update: PeerProgressRecord = {
      peerId,
      username: `user-${peerId.slice(-2)}`,
      role: mode === "aux" ? "aux" : "trainer",
      record,
      receivedAt: clock.now,
    };
    watch.observe(update);
  };
  /** `peerId` publishes one digest per step, for steps `from` to `to`, `hex(step)` each. */
  const history = (peerId: string, from: number, to: number, hex: (step: number) => string): void => {
    for (let step = from; step <= to; step++) push(peerId, { epoch: step, digest: hex(step) });
  };
  const advance = (ms: number): void => {
    clock.now += ms;
  };
  return { watch, clock, exact, push, history, advance };
}

/** One digest per step, the same on every trainer of one model: `model` tells the models apart. */
function modelDigest(model: string): (step: number) => string {
  return (step) => `${model}${step.toString(16).padStart(15, "0")}`;
}

const one = modelDigest("a");
const other = modelDigest("b");

describe("SplitWatch: diverged", () => {
  it("says nothing while the trainers hold equal digests at the steps they share", () => {
    const { watch, push, history } = setup();
    expect(watch.current()).toBeNull();
    history(A, 1, 3, one);
    history(B, 1, 3, one);
    history(C, 2, 3, one);
    expect(watch.current()).toBeNull();
    // One trainer a step ahead of the others is no split: they share no later step yet.
    push(A, { epoch: 4, digest: one(4) });
    expect(watch.current()).toBeNull();
  });

  it("reports two trainers with different digests at one step: the step, the sides largest first, a summary", () => {
    const { watch, clock, push } = setup();
    push(A, { epoch: 3, digest: digest("a") });
    push(B, { epoch: 3, digest: digest("b") });
    push(C, { epoch: 3, digest: digest("a") });
    expect(watch.current()).toEqual({
      kind: "diverged",
      step: 3,
      since: clock.now,
      groups: [
        { digest: digest("a"), peers: [A, C] },
        { digest: digest("b"), peers: [B] },
      ],
      summary: `2 different models at step 3: 2 trainers with ${digest("a")}, 1 trainer with ${digest("b")}`,
    });
  });

  it("orders sides by size, then by digest, and names every side in the summary", () => {
    const { watch, push } = setup();
    for (const [peerId, hex] of [
      [A, "c"],
      [B, "9"],
      [C, "9"],
      [D, "9"],
      [E, "1"],
      [F, "1"],
    ] as const) {
      push(peerId, { epoch: 7, digest: digest(hex) });
    }
    push(peer(6), { epoch: 7, digest: digest("0") });
    const split = watch.current();
    expect(split?.groups).toEqual([
      { digest: digest("9"), peers: [B, C, D] },
      { digest: digest("1"), peers: [E, F] },
      { digest: digest("0"), peers: [peer(6)] },
      { digest: digest("c"), peers: [A] },
    ]);
    expect(split?.summary).toBe(
      `4 different models at step 7: 3 trainers with ${digest("9")}, 2 trainers with ${digest("1")}, ` +
        `1 trainer with ${digest("0")}, 1 trainer with ${digest("c")}`,
    );
  });

  it("compares each pair at the latest step both published, and reports the latest conflict", () => {
    const { watch, push, history } = setup();
    // They agreed at step 1 and parted at step 2.
    history(A, 1, 3, one);
    history(B, 1, 2, (step) => (step === 1 ? one(1) : other(step)));
    expect(watch.current()).toMatchObject({ kind: "diverged", step: 2 });
    // C parted from A later, at step 5: that conflict is reported.
    history(C, 1, 3, one);
    push(A, { epoch: 5, digest: one(5) });
    push(C, { epoch: 5, digest: other(5) });
    expect(watch.current()).toMatchObject({
      step: 5,
      groups: [
        { digest: one(5), peers: [A] },
        { digest: other(5), peers: [C] },
      ],
    });
  });

  it("is one model again once the trainer loaded the swarm's state at a later step", () => {
    const { watch, push, history } = setup();
    history(A, 1, 4, one);
    history(B, 1, 3, (step) => (step === 1 ? one(1) : other(step)));
    expect(watch.current()).toMatchObject({ kind: "diverged", step: 3 });
    // B loads the swarm's state of step 4: the same bits as A at step 4.
    push(B, { epoch: 4, digest: one(4) });
    expect(watch.current()).toBeNull();
  });

  it("is one model again once the trainer went back to an older step, which replaces its later digests", () => {
    const { watch, push, history } = setup();
    history(A, 1, 3, one);
    history(B, 1, 4, (step) => (step === 1 ? one(1) : other(step)));
    expect(watch.current()).toMatchObject({ kind: "diverged", step: 3 });
    // B drops its own steps and goes back to the state of step 2 it got from the swarm.
    push(B, { epoch: 2, digest: one(2) });
    expect(watch.current()).toBeNull();
    // Its step 3 is gone: a digest it published before going back no longer counts against A.
    push(A, { epoch: 4, digest: one(4) });
    expect(watch.current()).toBeNull();
  });

  it("keeps a trainer's digests when a record of it carries none", () => {
    const { watch, push } = setup();
    push(A, { epoch: 3, digest: digest("a") });
    push(B, { epoch: 3, digest: digest("b") });
    push(B, { epoch: 3 });
    expect(watch.current()).toMatchObject({ kind: "diverged", step: 3 });
  });

  it("does not compare digests while the swarm averages in more than one group (Moshpit)", () => {
    const { watch, exact, push, advance } = setup();
    exact.value = false;
    push(A, { epoch: 3, digest: other(3) });
    push(B, { epoch: 3, digest: one(3) });
    expect(watch.current()).toBeNull();
    // "alone" still works without exactness: C steps alone for 40 s while A and B train on.
    for (let second = 1; second <= 40; second++) {
      advance(1000);
      push(A, { epoch: 3 + second, digest: other(3 + second) });
      push(B, { epoch: 3 + second, digest: one(3 + second) });
      push(C, { epoch: 50 + second, digest: digest("c"), soloSteps: 10 + second });
    }
    expect(watch.current()).toMatchObject({ kind: "alone", step: 90 });
    exact.value = true;
    expect(watch.current()).toMatchObject({ kind: "diverged", step: 43 });
  });
});

describe("SplitWatch: alone", () => {
  /**
   * Every second for `seconds`: each trainer in `moving` publishes its next epoch with no solo
   * steps (it trains with others), and `lone` publishes `soloSteps(second)` at its own epoch.
   */
  const train = (
    parts: ReturnType<typeof setup>,
    seconds: number,
    moving: readonly string[],
    lone: string,
    soloSteps: (second: number) => number,
  ): void => {
    for (let second = 1; second <= seconds; second++) {
      parts.advance(1000);
      for (const peerId of moving) parts.push(peerId, { epoch: 100 + second, soloSteps: 0 });
      parts.push(lone, { epoch: 200 + second, soloSteps: soloSteps(second) });
    }
  };

  it("reports a trainer with aloneSteps solo steps in a row while another trainer trains", () => {
    const parts = setup();
    const { watch, clock, exact, push, advance } = parts;
    exact.value = false;
    push(A, { epoch: 100, soloSteps: 0 });
    push(B, { epoch: 200, soloSteps: 0 });
    // B steps alone for 40 s, with up to 9 solo steps: not yet.
    train(parts, 40, [A], B, (second) => Math.min(second, 9));
    expect(watch.current()).toBeNull();
    advance(1000);
    push(A, { epoch: 141, soloSteps: 0 });
    push(B, { epoch: 241, soloSteps: 10 });
    expect(watch.current()).toEqual({
      kind: "alone",
      step: 241,
      since: clock.now,
      groups: [
        { digest: null, peers: [A] },
        { digest: null, peers: [B] },
      ],
      summary: expect.stringMatching(
        new RegExp(`^trainer ${short(B)} has taken 10 steps in a row with no other trainer while 1 other`),
      ) as unknown,
    });
  });

  it("reports two models at one step before a trainer alone", () => {
    const parts = setup();
    const { watch, push } = parts;
    train(parts, 40, [A], B, (second) => second);
    push(A, { epoch: 140, digest: one(140), soloSteps: 0 });
    push(B, { epoch: 140, digest: other(140), soloSteps: 40 });
    expect(watch.current()).toMatchObject({ kind: "diverged", step: 140 });
  });

  it("names the lone trainer and how many others train", () => {
    const parts = setup();
    parts.exact.value = false;
    train(parts, 40, [A, C], B, (second) => 10 + second);
    expect(parts.watch.current()).toMatchObject({
      kind: "alone",
      step: 240,
      groups: [
        { digest: null, peers: [A, C] },
        { digest: null, peers: [B] },
      ],
      summary: `trainer ${short(B)} has taken 50 steps in a row with no other trainer while 2 others train: it trains a model of its own`,
    });
  });

  it("says one other trainer in the singular", () => {
    const parts = setup();
    parts.exact.value = false;
    train(parts, 40, [A], B, () => 12);
    expect(parts.watch.current()?.summary).toBe(
      `trainer ${short(B)} has taken 12 steps in a row with no other trainer while 1 other trains: it trains a model of its own`,
    );
  });

  it("takes aloneSteps from the options, and a shared step ends it", () => {
    const parts = setup({ aloneSteps: 3 });
    const { watch, exact } = parts;
    exact.value = false;
    train(parts, 40, [A], B, () => 2);
    expect(watch.current()).toBeNull();
    train(parts, 1, [A], B, () => 3);
    expect(watch.current()).toMatchObject({ kind: "alone", groups: [{ peers: [A] }, { peers: [B] }] });
    // A step shared with another trainer resets its count: one model again.
    train(parts, 1, [A], B, () => 0);
    expect(watch.current()).toBeNull();
  });

  it("says nothing of a lone trainer with nobody else training: its steps are the run's", () => {
    const parts = setup();
    const { watch, push, advance } = parts;
    parts.exact.value = false;
    for (let second = 1; second <= 40; second++) {
      advance(1000);
      push(A, { epoch: second, digest: one(second), soloSteps: second });
      // An aux peer is no other trainer.
      push(X, { epoch: second, mode: "aux" });
      expect(watch.current()).toBeNull();
    }
    // A trainer comes and trains: now A is alone while another trains.
    train(parts, 3, [C], A, (second) => 40 + second);
    expect(watch.current()).toMatchObject({ kind: "alone", groups: [{ peers: [C] }, { peers: [A] }] });
    // It leaves: once its record is stale, A is the run again.
    advance(TTL + 1);
    push(A, { epoch: 250, soloSteps: 50 });
    expect(watch.current()).toBeNull();
  });
});

describe("SplitWatch: what it leaves out", () => {
  it("leaves out trainers whose record is older than ttlMs, and keeps one exactly ttlMs old", () => {
    const { watch, push, advance } = setup();
    push(A, { epoch: 3, digest: digest("a") });
    push(C, { epoch: 3, digest: digest("c") });
    advance(1000);
    push(B, { epoch: 3, digest: digest("b") });
    advance(TTL - 1000);
    expect(watch.current()?.groups.map((group) => group.peers)).toEqual([[A], [B], [C]]);
    advance(1);
    // A and C are stale: B alone is one model.
    expect(watch.current()).toBeNull();
    // A comes back: the split is seen again, without C.
    push(A, { epoch: 3, digest: digest("a") });
    expect(watch.current()?.groups).toEqual([
      { digest: digest("a"), peers: [A] },
      { digest: digest("b"), peers: [B] },
    ]);
  });

  it("ignores aux records, whatever they claim", () => {
    const { watch, exact, push } = setup();
    push(A, { epoch: 3, digest: digest("a") });
    push(B, { epoch: 3, digest: digest("b"), mode: "aux", soloSteps: 50 });
    expect(watch.current()).toBeNull();
    exact.value = false;
    push(C, { epoch: 3, digest: digest("c"), mode: "aux", soloSteps: 50 });
    push(A, { epoch: 4, soloSteps: 50 });
    expect(watch.current()).toBeNull();
  });

  it("ignores trainers of another generation, and reset(generation) starts over", () => {
    const { watch, clock, push, advance } = setup();
    push(A, { epoch: 3, digest: digest("a") });
    push(B, { epoch: 3, digest: digest("b"), generation: 1 });
    expect(watch.current()).toBeNull();
    push(C, { epoch: 3, digest: digest("c") });
    expect(watch.current()).toMatchObject({ kind: "diverged", since: clock.now });
    const first = clock.now;
    advance(1000);
    // The run is rolled back: generation 1 from now on, and nothing seen before counts.
    watch.reset(1);
    expect(watch.current()).toBeNull();
    // Generation-0 records that still arrive are ignored.
    push(A, { epoch: 4, digest: digest("a") });
    push(C, { epoch: 4, digest: digest("c") });
    expect(watch.current()).toBeNull();
    push(B, { epoch: 2, digest: digest("b"), generation: 1 });
    push(D, { epoch: 2, digest: digest("d"), generation: 1 });
    const split = watch.current();
    expect(split).toMatchObject({ kind: "diverged", step: 2 });
    expect(split?.groups.flatMap((group) => group.peers)).toEqual([B, D]);
    // A split of the new generation is a new one, even within clearAfterMs of the old one.
    expect(split?.since).toBe(clock.now);
    expect(split?.since).not.toBe(first);
  });

  it("starts over on reset even to the generation it watches", () => {
    const { watch, push } = setup();
    push(A, { epoch: 3, digest: digest("a") });
    push(B, { epoch: 3, digest: digest("b") });
    expect(watch.current()).toMatchObject({ kind: "diverged" });
    watch.reset(0);
    expect(watch.current()).toBeNull();
    // Only what arrives from now on counts.
    push(A, { epoch: 3, digest: digest("a") });
    expect(watch.current()).toBeNull();
  });

  it("starts a trainer's history over when it moves to another generation", () => {
    const { watch, push } = setup();
    watch.reset(2);
    // A still trains the rolled-back lineage: its digest of step 3 is of generation 0.
    push(A, { epoch: 3, digest: digest("a") });
    push(B, { epoch: 3, digest: digest("b"), generation: 2 });
    expect(watch.current()).toBeNull();
    // A loads the rollback state and steps on: its generation-0 digests are no longer its own.
    push(A, { epoch: 5, digest: digest("a"), generation: 2 });
    expect(watch.current()).toBeNull();
    push(A, { epoch: 3, digest: digest("c"), generation: 2 });
    expect(watch.current()).toMatchObject({ kind: "diverged", step: 3 });
  });
});

describe("SplitWatch: since", () => {
  it("keeps `since` across the reports of one split, and after a gap shorter than clearAfterMs", () => {
    const { watch, clock, push, advance } = setup({ clearAfterMs: 10_000 });
    push(A, { epoch: 3, digest: digest("a") });
    push(B, { epoch: 3, digest: digest("b") });
    const first = clock.now;
    expect(watch.current()?.since).toBe(first);
    advance(3000);
    push(A, { epoch: 4, digest: digest("c") });
    push(B, { epoch: 4, digest: digest("d") });
    expect(watch.current()).toMatchObject({ step: 4, since: first });
    // B loads A's state: gone, then back within clearAfterMs of the last time it was seen.
    push(B, { epoch: 4, digest: digest("c") });
    const lastSeen = clock.now;
    expect(watch.current()).toBeNull();
    advance(10_000);
    expect(watch.current()).toBeNull();
    push(A, { epoch: 5, digest: digest("e") });
    push(B, { epoch: 5, digest: digest("f") });
    expect(clock.now - lastSeen).toBe(10_000);
    expect(watch.current()).toMatchObject({ step: 5, since: first });
  });

  it("starts `since` over once the split has been gone for longer than clearAfterMs", () => {
    const { watch, clock, push, advance } = setup({ clearAfterMs: 10_000 });
    push(A, { epoch: 3, digest: digest("a") });
    push(B, { epoch: 3, digest: digest("b") });
    const first = clock.now;
    expect(watch.current()?.since).toBe(first);
    push(B, { epoch: 3, digest: digest("a") });
    expect(watch.current()).toBeNull();
    advance(10_001);
    push(A, { epoch: 4, digest: digest("a") });
    push(B, { epoch: 4, digest: digest("a") });
    expect(watch.current()).toBeNull();
    push(B, { epoch: 4, digest: digest("b") });
    expect(watch.current()).toMatchObject({ step: 4, since: clock.now });
    expect(clock.now).toBe(first + 10_001);
  });

  it("clears after 10 s by default", () => {
    const { watch, clock, push, advance } = setup();
    push(A, { epoch: 3, digest: digest("a") });
    push(B, { epoch: 3, digest: digest("b") });
    const first = clock.now;
    expect(watch.current()?.since).toBe(first);
    push(B, { epoch: 3, digest: digest("a") });
    advance(10_000);
    expect(watch.current()).toBeNull();
    push(B, { epoch: 3, digest: digest("b") });
    push(A, { epoch: 3, digest: digest("a") });
    expect(watch.current()?.since).toBe(first);
    push(B, { epoch: 3, digest: digest("a") });
    advance(10_001);
    expect(watch.current()).toBeNull();
    push(B, { epoch: 3, digest: digest("b") });
    push(A, { epoch: 3, digest: digest("a") });
    expect(watch.current()?.since).toBe(clock.now);
  });
});

describe("SplitWatch: bounds", () => {
  it("keeps historySteps digests per trainer, the latest ones", () => {
    const { watch, push, history } = setup({ historySteps: 3 });
    history(A, 1, 5, one);
    // A no longer holds its digest of step 2: nothing to compare B's with.
    push(B, { epoch: 2, digest: other(2) });
    expect(watch.current()).toBeNull();
    // Step 3 is still kept.
    push(C, { epoch: 3, digest: other(3) });
    expect(watch.current()).toMatchObject({ kind: "diverged", step: 3 });
  });

  it("keeps 64 steps by default", () => {
    const { watch, push, history } = setup();
    history(A, 1, 65, one);
    push(B, { epoch: 1, digest: other(1) });
    expect(watch.current()).toBeNull();
    push(C, { epoch: 2, digest: other(2) });
    expect(watch.current()).toMatchObject({ kind: "diverged", step: 2 });
  });

  it("compares at most maxCompared trainers, the first by PeerId", () => {
    const { watch, push } = setup({ maxCompared: 2 });
    push(C, { epoch: 3, digest: digest("c") });
    push(B, { epoch: 3, digest: digest("a") });
    push(A, { epoch: 3, digest: digest("a") });
    expect(watch.current()).toBeNull();
    push(B, { epoch: 3, digest: digest("b") });
    expect(watch.current()?.groups.flatMap((group) => group.peers)).toEqual([A, B]);
  });

  it("compares 64 trainers by default", () => {
    const { watch, push } = setup();
    for (let i = 0; i < 65; i++) push(peer(i), { epoch: 3, digest: i === 64 ? digest("b") : digest("a") });
    expect(watch.current()).toBeNull();
    push(peer(63), { epoch: 3, digest: digest("b") });
    expect(watch.current()?.groups).toEqual([
      { digest: digest("a"), peers: Array.from({ length: 63 }, (_, i) => peer(i)) },
      { digest: digest("b"), peers: [peer(63)] },
    ]);
  });
});
