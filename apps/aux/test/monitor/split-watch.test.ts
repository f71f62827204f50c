import type { PeerProgressRecord, ProgressRecord } from "@barnraise/swarm";
import { describe, expect, it } from "vitest";
import { SplitWatch, type SplitReport, type SplitWatchOptions } from "../../src/monitor/split-watch.ts";

const TTL = 5000;
/** The watch's defaults: how long a split must last to be reported, and be gone to be over. */
const REPORT_AFTER_MS = 15_000;
const CLEAR_AFTER_MS = 10_000;
/** …and how long a trainer must step alone. */
const ALONE_FOR_MS = 30_000;
const BASE58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";

/** A PeerId-like name; names sort in index order, as the watch sorts PeerIds. */
function peer(index: number): string {
  return `12D3KooW${"z".repeat(42)}${BASE58.charAt(Math.floor(index / 58))}${BASE58.charAt(index % 58)}`;
}

const [A, B, C, D, E, F] = [peer(0), peer(1), peer(2), peer(3), peer(4), peer(5)];
/** An aux peer's id. */
const X = peer(57);

/** How the summary names a trainer: "…" and the last 10 characters of its PeerId. */
function short(peerId: string): string {
  return `…${peerId.slice(-10)}`;
}

/** A 16-hex-digit digest made of one repeated digit. */
function digest(hex: string): string {
  return hex.repeat(16);
}

/** The answers that are reports. */
function reports(answers: ReadonlyArray<SplitReport | null>): SplitReport[] {
  return answers.filter((answer) => answer !== null);
}

interface Fields {
  /** The epoch the trainer is at (and, unless `hashEpoch` says otherwise, its digest's epoch). */
  readonly epoch: number;
  /** Its state digest at `hashEpoch`; no stateHash when absent. */
  readonly digest?: string;
  readonly hashEpoch?: number;
  /** The digest is of a Moshpit grid step. */
  readonly grid?: boolean;
  readonly soloSteps?: number;
  readonly generation?: number;
  readonly mode?: ProgressRecord["mode"];
}

/** A fake clock and a watch that reads it; records are received at the clock's time. */
function setup(options: Partial<SplitWatchOptions> = {}) {
  const clock = { now: 1_700_000_000_000 };
  const ttlMs = options.ttlMs ?? TTL;
  const watch = new SplitWatch({ now: () => clock.now, ...options, ttlMs });
  /** Each peer's latest record, and when it was received. */
  const latest = new Map<string, { readonly fields: Fields; readonly at: number }>();
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
        : {
            stateHash: {
              epoch: fields.hashEpoch ?? fields.epoch,
              digest: fields.digest,
              ...(fields.grid === undefined ? {} : { grid: fields.grid }),
            },
          }),
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
    latest.set(peerId, { fields, at: clock.now });
    watch.observe(update);
  };
  /** The epoch of `peerId`'s latest record (0 before its first). */
  const epochOf = (peerId: string): number => latest.get(peerId)?.fields.epoch ?? 0;
  /** `peerId` takes a single step: its next epoch, with `fields` besides. */
  const step = (peerId: string, fields: Omit<Fields, "epoch"> = {}): void => {
    push(peerId, { ...fields, epoch: epochOf(peerId) + 1 });
  };
  /** `peerId` publishes one digest per step, for steps `from` to `to`, `hex(step)` each. */
  const history = (peerId: string, from: number, to: number, hex: (step: number) => string): void => {
    for (let at = from; at <= to; at++) push(peerId, { epoch: at, digest: hex(at) });
  };
  const advance = (ms: number): void => {
    clock.now += ms;
  };
  /**
   * The heartbeat for `ms`: the watch is asked now, then after every second (and at the end), each
   * time once `peers` (by default every peer whose record is still fresh) have published their
   * latest record again. Returns every answer, the latest last.
   */
  const holdAll = (ms: number, peers?: readonly string[]): Array<SplitReport | null> => {
    const answers = [watch.current()];
    for (let held = 0; held < ms;) {
      const live =
        peers ?? [...latest].filter(([, last]) => clock.now - last.at <= ttlMs).map(([peerId]) => peerId);
      const ms1 = Math.min(1000, ms - held);
      advance(ms1);
      held += ms1;
      for (const peerId of live) {
        const last = latest.get(peerId);
        if (last !== undefined) push(peerId, last.fields);
      }
      answers.push(watch.current());
    }
    return answers;
  };
  /** `holdAll`'s latest answer. */
  const hold = (ms: number, peers?: readonly string[]): SplitReport | null =>
    holdAll(ms, peers).at(-1) ?? null;
  /**
   * Every second for `seconds`: each trainer in `moving` takes a single step that it shares (no solo
   * steps), `lone` takes a step with `soloSteps(second)` solo steps in a row, and the watch is asked.
   * Returns every answer.
   */
  const train = (
    seconds: number,
    moving: readonly string[],
    lone: string,
    soloSteps: (second: number) => number,
  ): Array<SplitReport | null> => {
    const answers: Array<SplitReport | null> = [];
    for (let second = 1; second <= seconds; second++) {
      advance(1000);
      for (const peerId of moving) step(peerId, { soloSteps: 0 });
      step(lone, { soloSteps: soloSteps(second) });
      answers.push(watch.current());
    }
    return answers;
  };
  return { watch, clock, push, step, epochOf, history, advance, hold, holdAll, train };
}

/** One digest per step, the same on every trainer of one model: `model` tells the models apart. */
function modelDigest(model: string): (step: number) => string {
  return (step) => `${model}${step.toString(16).padStart(15, "0")}`;
}

const one = modelDigest("a");
const other = modelDigest("b");

describe("SplitWatch: diverged", () => {
  it("says nothing while the trainers hold equal digests at the steps they share", () => {
    const { watch, push, history, holdAll } = setup();
    expect(watch.current()).toBeNull();
    history(A, 1, 3, one);
    history(B, 1, 3, one);
    history(C, 2, 3, one);
    expect(reports(holdAll(2 * REPORT_AFTER_MS))).toEqual([]);
    // One trainer a step ahead of the others is no split: they share no later step yet.
    push(A, { epoch: 4, digest: one(4) });
    expect(reports(holdAll(2 * REPORT_AFTER_MS))).toEqual([]);
  });

  it("reports two trainers with different digests at one step: the step, the sides largest first, a summary", () => {
    const { watch, clock, push, hold } = setup();
    push(A, { epoch: 3, digest: digest("a") });
    push(B, { epoch: 3, digest: digest("b") });
    push(C, { epoch: 3, digest: digest("a") });
    const seen = clock.now;
    expect(watch.current()).toBeNull();
    expect(hold(REPORT_AFTER_MS)).toEqual({
      kind: "diverged",
      step: 3,
      since: seen,
      groups: [
        { digest: digest("a"), peers: [A, C] },
        { digest: digest("b"), peers: [B] },
      ],
      summary: `2 different models at step 3: 2 trainers with ${digest("a")}, 1 trainer with ${digest("b")}`,
    });
  });

  it("orders sides by size, then by digest, and names every side in the summary", () => {
    const { push, hold } = setup();
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
    const split = hold(REPORT_AFTER_MS);
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
    const { watch, push, history, hold } = setup();
    // They agreed at step 1 and parted at step 2.
    history(A, 1, 3, one);
    history(B, 1, 2, (step) => (step === 1 ? one(1) : other(step)));
    expect(hold(REPORT_AFTER_MS)).toMatchObject({ kind: "diverged", step: 2 });
    // C parted from A later, at step 5: that conflict is reported (the split goes on: at once).
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
    const { watch, push, history, hold } = setup();
    history(A, 1, 4, one);
    history(B, 1, 3, (step) => (step === 1 ? one(1) : other(step)));
    expect(hold(REPORT_AFTER_MS)).toMatchObject({ kind: "diverged", step: 3 });
    // B loads the swarm's state of step 4: the same bits as A at step 4.
    push(B, { epoch: 4, digest: one(4) });
    expect(watch.current()).toBeNull();
  });

  it("is one model again once the trainer went back to an older step, which replaces its later digests", () => {
    const { watch, push, history, hold, holdAll } = setup();
    history(A, 1, 3, one);
    history(B, 1, 4, (step) => (step === 1 ? one(1) : other(step)));
    expect(hold(REPORT_AFTER_MS)).toMatchObject({ kind: "diverged", step: 3 });
    // B drops its own steps and goes back to the state of step 2 it got from the swarm.
    push(B, { epoch: 2, digest: one(2) });
    expect(watch.current()).toBeNull();
    // Its step 3 is gone: a digest it published before going back no longer counts against A.
    push(A, { epoch: 4, digest: one(4) });
    expect(reports(holdAll(2 * REPORT_AFTER_MS))).toEqual([]);
  });

  it("keeps a trainer's digests when a record of it carries none", () => {
    const { push, hold } = setup();
    push(A, { epoch: 3, digest: digest("a") });
    push(B, { epoch: 3, digest: digest("b") });
    push(B, { epoch: 3 });
    expect(hold(REPORT_AFTER_MS)).toMatchObject({ kind: "diverged", step: 3 });
  });
});

describe("SplitWatch: Moshpit grid steps", () => {
  it("never compares the digests of grid steps, however much they differ", () => {
    const { watch, step, advance } = setup();
    // A and B each end every grid step with their group's digest; C publishes exact digests.
    const answers: Array<SplitReport | null> = [];
    for (let second = 1; second <= (3 * REPORT_AFTER_MS) / 1000; second++) {
      advance(1000);
      step(A, { digest: other(second), grid: true });
      step(B, { digest: digest((second % 10).toString()), grid: true });
      step(C, { digest: one(second) });
      answers.push(watch.current());
    }
    expect(reports(answers)).toEqual([]);
  });

  it("compares the exact steps between grid steps", () => {
    const { watch, push, hold } = setup();
    push(A, { epoch: 3, digest: digest("a"), grid: true });
    push(B, { epoch: 3, digest: digest("b"), grid: true });
    push(A, { epoch: 4, digest: one(4) });
    push(B, { epoch: 4, digest: other(4) });
    expect(hold(REPORT_AFTER_MS)).toMatchObject({ kind: "diverged", step: 4 });
    // A grid step after it leaves the conflict at step 4 as it is.
    push(A, { epoch: 5, digest: digest("c"), grid: true });
    push(B, { epoch: 5, digest: digest("d"), grid: true });
    expect(watch.current()).toMatchObject({ kind: "diverged", step: 4 });
  });

  it("drops the trainer's digests at and after a grid step's epoch: it went back there", () => {
    const { watch, push, history, hold } = setup();
    history(A, 1, 5, one);
    history(B, 1, 5, (step) => (step <= 3 ? one(step) : other(step)));
    expect(hold(REPORT_AFTER_MS)).toMatchObject({ kind: "diverged", step: 5 });
    // A grid digest at a later epoch keeps B's earlier digests.
    push(B, { epoch: 6, digest: digest("e"), grid: true });
    expect(watch.current()).toMatchObject({ kind: "diverged", step: 5 });
    // B steps again from the state of epoch 4, over a grid: its digests of steps 4 to 6 are gone,
    // and the grid digest (unlike A's exact one) is not compared either.
    push(B, { epoch: 4, digest: digest("e"), grid: true });
    expect(watch.current()).toBeNull();
    // Its next exact step agrees with A's.
    push(B, { epoch: 5, digest: one(5) });
    expect(watch.current()).toBeNull();
  });

  it("still sees a trainer alone while the others step over grids", () => {
    const { watch, clock, step, advance } = setup();
    const answers: Array<SplitReport | null> = [];
    // C steps alone while A and B train together, in different groups of a grid.
    for (let second = 1; second <= 60; second++) {
      advance(1000);
      step(A, { digest: other(second), grid: true, soloSteps: 0 });
      step(B, { digest: one(second), grid: true, soloSteps: 0 });
      step(C, { digest: digest("c"), grid: true, soloSteps: 10 + second });
      answers.push(watch.current());
    }
    // Alone from second 31 (30 s after its first solo record), reported from second 46.
    expect(answers.slice(0, 45)).toEqual(Array<null>(45).fill(null));
    expect(answers.slice(45).every((answer) => answer?.kind === "alone")).toBe(true);
    expect(watch.current()).toMatchObject({
      kind: "alone",
      step: 60,
      since: clock.now - 29_000,
      groups: [
        { digest: null, peers: [A, B] },
        { digest: null, peers: [C] },
      ],
    });
  });
});

describe("SplitWatch: alone", () => {
  it("reports a trainer with aloneSteps solo steps in a row for 30 s while another trains, once that lasted 15 s", () => {
    const { watch, clock, push, advance, train } = setup();
    push(A, { epoch: 100, soloSteps: 0 });
    push(B, { epoch: 200, soloSteps: 0 });
    // B steps alone for 40 s, with up to 9 solo steps: not yet.
    expect(reports(train(40, [A], B, (second) => Math.min(second, 9)))).toEqual([]);
    // Its 10th solo step: B is alone from now on, but that is not reported before it has lasted 15 s.
    expect(train(1, [A], B, () => 10)).toEqual([null]);
    const seen = clock.now;
    expect(reports(train(14, [A], B, (second) => 10 + second))).toEqual([]);
    advance(999);
    expect(watch.current()).toBeNull();
    advance(1);
    expect(watch.current()).toEqual({
      kind: "alone",
      step: 255,
      since: seen,
      groups: [
        { digest: null, peers: [A] },
        { digest: null, peers: [B] },
      ],
      summary: `trainer ${short(B)} has taken 24 steps in a row with no other trainer while 1 other trains: it trains a model of its own`,
    });
  });

  it("sees it once its solo run has lasted 30 s by default, counted from the first solo record seen", () => {
    const { watch, push, advance, train } = setup({ reportAfterMs: 0 });
    push(A, { epoch: 100, soloSteps: 0 });
    push(B, { epoch: 200, soloSteps: 0 });
    // B's first solo record already says 10 steps: its run is timed from when the watch saw it.
    expect(reports(train(ALONE_FOR_MS / 1000, [A], B, (second) => 9 + second))).toEqual([]);
    advance(999);
    expect(watch.current()).toBeNull();
    advance(1);
    expect(watch.current()).toMatchObject({ kind: "alone", step: 230 });
  });

  it("takes aloneForMs from the options", () => {
    const { train } = setup({ aloneForMs: 5000, reportAfterMs: 0 });
    expect(reports(train(5, [A], B, (second) => 10 + second))).toEqual([]);
    expect(train(1, [A], B, () => 16).at(-1)).toMatchObject({
      kind: "alone",
      groups: [{ peers: [A] }, { peers: [B] }],
    });
  });

  it("names the lone trainer and how many others train", () => {
    const { train } = setup();
    const answers = train(46, [A, C], B, (second) => 10 + second);
    expect(reports(answers)).toHaveLength(1);
    expect(answers.at(-1)).toMatchObject({
      kind: "alone",
      step: 46,
      groups: [
        { digest: null, peers: [A, C] },
        { digest: null, peers: [B] },
      ],
      summary: `trainer ${short(B)} has taken 56 steps in a row with no other trainer while 2 others train: it trains a model of its own`,
    });
  });

  it("says one other trainer in the singular", () => {
    const { train } = setup();
    expect(train(46, [A], B, () => 12).at(-1)?.summary).toBe(
      `trainer ${short(B)} has taken 12 steps in a row with no other trainer while 1 other trains: it trains a model of its own`,
    );
  });

  it("names a trainer by the last 10 characters of its PeerId, and a 16-character one whole", () => {
    const long = "12345678901234567";
    const brief = "1234567890123456";
    for (const [lone, named] of [
      [long, "…8901234567"],
      [brief, brief],
    ] as const) {
      const { train } = setup();
      expect(train(46, [A], lone, () => 12).at(-1)?.summary).toBe(
        `trainer ${named} has taken 12 steps in a row with no other trainer while 1 other trains: it trains a model of its own`,
      );
    }
  });

  it("takes aloneSteps from the options; a shared step ends the solo run, and the next one is timed anew", () => {
    const { train } = setup({ aloneSteps: 3 });
    expect(reports(train(40, [A], B, () => 2))).toEqual([]);
    // Its third solo step makes it alone; reported 15 s later.
    const alone = train(16, [A], B, () => 3);
    expect(reports(alone.slice(0, 15))).toEqual([]);
    expect(alone.at(-1)).toMatchObject({ kind: "alone", groups: [{ peers: [A] }, { peers: [B] }] });
    // A step shared with another trainer resets its count: one model again.
    expect(train(1, [A], B, () => 0)).toEqual([null]);
    // A new solo run must last 30 s again, and the split 15 s more.
    const again = train(46, [A], B, () => 3);
    expect(reports(again.slice(0, 45))).toEqual([]);
    expect(again.at(-1)).toMatchObject({ kind: "alone" });
  });

  it("reports two models at one step before a trainer alone", () => {
    const { watch, push, train } = setup();
    expect(train(46, [A], B, (second) => second).at(-1)).toMatchObject({ kind: "alone" });
    push(A, { epoch: 47, digest: one(47), soloSteps: 0 });
    push(B, { epoch: 47, digest: other(47), soloSteps: 47 });
    expect(watch.current()).toMatchObject({ kind: "diverged", step: 47 });
  });

  it("says nothing of a lone trainer with nobody else training: its steps are the run's", () => {
    const { watch, step, advance, train } = setup();
    const answers: Array<SplitReport | null> = [];
    for (let second = 1; second <= 60; second++) {
      advance(1000);
      step(A, { soloSteps: second });
      // An aux peer is no other trainer, though it moves one epoch at a time.
      step(X, { mode: "aux" });
      answers.push(watch.current());
    }
    expect(reports(answers)).toEqual([]);
    // A trainer comes and trains (its first record, then single steps): now A is alone while
    // another trains, from C's second step on, and reported 15 s later.
    const joined = train(20, [C], A, (second) => 60 + second);
    expect(joined.findIndex((answer) => answer !== null)).toBe(17);
    expect(joined.at(-1)).toMatchObject({ kind: "alone", groups: [{ peers: [C] }, { peers: [A] }] });
    // It leaves: its record stays fresh for ttlMs, then A is the run again.
    const left: Array<SplitReport | null> = [];
    for (let second = 1; second <= TTL / 1000 + 1; second++) {
      advance(1000);
      step(A, { soloSteps: 80 + second });
      left.push(watch.current());
    }
    expect(left.slice(0, -1).every((answer) => answer?.kind === "alone")).toBe(true);
    expect(left.at(-1)).toBeNull();
  });

  it("does not see a lone volunteer alone when a trainer joins by loading the swarm's state", () => {
    const { watch, push, step, advance, epochOf } = setup();
    const answers: Array<SplitReport | null> = [];
    // B trains the run alone for 5 minutes: hundreds of solo steps.
    for (let second = 1; second <= 300; second++) {
      advance(1000);
      step(B, { soloSteps: second });
      answers.push(watch.current());
    }
    // A joins: its first record (a new node, at epoch 0), then the state it loads (a jump of
    // 300 epochs), then its first single step.
    advance(1000);
    push(A, { epoch: 0, soloSteps: 0 });
    step(B, { soloSteps: 301 });
    answers.push(watch.current());
    advance(1000);
    push(A, { epoch: epochOf(B), soloSteps: 0 });
    step(B, { soloSteps: 302 });
    answers.push(watch.current());
    advance(1000);
    step(A, { soloSteps: 0 });
    step(B, { soloSteps: 303 });
    answers.push(watch.current());
    // Its next step takes a while; B steps on meanwhile, and A's record stays fresh.
    for (let second = 1; second <= 60; second++) {
      advance(1000);
      push(A, { epoch: epochOf(A), soloSteps: 0 });
      step(B, { soloSteps: 303 + second });
      answers.push(watch.current());
    }
    expect(reports(answers)).toEqual([]);
    // A second single step while B still steps alone: A trains without B. Reported 15 s later.
    const after: Array<SplitReport | null> = [];
    for (let second = 1; second <= REPORT_AFTER_MS / 1000 + 1; second++) {
      advance(1000);
      if (second === 1) step(A, { soloSteps: 0 });
      else push(A, { epoch: epochOf(A), soloSteps: 0 });
      step(B, { soloSteps: 363 + second });
      after.push(watch.current());
    }
    expect(reports(after.slice(0, -1))).toEqual([]);
    expect(after.at(-1)).toMatchObject({ kind: "alone", groups: [{ peers: [A] }, { peers: [B] }] });
  });

  it.each([TTL, 60_000])(
    "does not see a trainer alone because one that just left is still fresh (ttlMs %i)",
    (ttlMs) => {
      const { watch, step, advance } = setup({ ttlMs });
      const answers: Array<SplitReport | null> = [];
      // A and B train together for a minute.
      for (let second = 1; second <= 60; second++) {
        advance(1000);
        step(A, { soloSteps: 0 });
        step(B, { soloSteps: 0 });
        answers.push(watch.current());
      }
      // A leaves. B's next step is its first alone; A's last one, alone as well, reaches the aux
      // just after it.
      advance(1000);
      step(B, { soloSteps: 1 });
      advance(500);
      step(A, { soloSteps: 1 });
      answers.push(watch.current());
      // B steps on alone while A's last record stays fresh, and after.
      for (let second = 1; second <= ttlMs / 1000 + 60; second++) {
        advance(1000);
        step(B, { soloSteps: 1 + second });
        answers.push(watch.current());
      }
      expect(reports(answers)).toEqual([]);
    },
  );
});

describe("SplitWatch: what it leaves out", () => {
  it("leaves out trainers whose record is older than ttlMs, and keeps one exactly ttlMs old", () => {
    const { watch, push, advance, hold } = setup();
    push(A, { epoch: 3, digest: digest("a") });
    push(C, { epoch: 3, digest: digest("c") });
    push(B, { epoch: 3, digest: digest("b") });
    expect(hold(REPORT_AFTER_MS)?.groups.map((group) => group.peers)).toEqual([[A], [B], [C]]);
    advance(1000);
    push(B, { epoch: 3, digest: digest("b") });
    advance(TTL - 1000);
    expect(watch.current()?.groups.map((group) => group.peers)).toEqual([[A], [B], [C]]);
    advance(1);
    // A and C are stale: B alone is one model.
    expect(watch.current()).toBeNull();
    // A comes back: the split is seen again (within clearAfterMs: reported at once), without C.
    push(A, { epoch: 3, digest: digest("a") });
    expect(watch.current()?.groups).toEqual([
      { digest: digest("a"), peers: [A] },
      { digest: digest("b"), peers: [B] },
    ]);
  });

  it("ignores aux records, whatever they claim", () => {
    const { watch, push, advance, holdAll } = setup();
    push(A, { epoch: 3, digest: digest("a") });
    push(X, { epoch: 3, digest: digest("b"), mode: "aux", soloSteps: 50 });
    expect(reports(holdAll(REPORT_AFTER_MS))).toEqual([]);
    // A steps alone for a minute while an aux peer moves one epoch at a time with other digests.
    const answers: Array<SplitReport | null> = [];
    for (let second = 1; second <= 60; second++) {
      advance(1000);
      push(A, { epoch: 3 + second, digest: one(3 + second), soloSteps: second });
      push(X, { epoch: 3 + second, digest: other(3 + second), mode: "aux", soloSteps: 50 + second });
      answers.push(watch.current());
    }
    expect(reports(answers)).toEqual([]);
  });

  it("ignores trainers of another generation, and reset(generation) starts over", () => {
    const { watch, clock, push, advance, hold, holdAll } = setup();
    push(A, { epoch: 3, digest: digest("a") });
    push(B, { epoch: 3, digest: digest("b"), generation: 1 });
    expect(reports(holdAll(REPORT_AFTER_MS))).toEqual([]);
    push(C, { epoch: 3, digest: digest("c") });
    const first = clock.now;
    expect(hold(REPORT_AFTER_MS)).toMatchObject({ kind: "diverged", since: first });
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
    // A split of the new generation is a new one, even within clearAfterMs of the old one.
    const seen = clock.now;
    expect(watch.current()).toBeNull();
    const split = hold(REPORT_AFTER_MS);
    expect(split).toMatchObject({ kind: "diverged", step: 2, since: seen });
    expect(split?.groups.flatMap((group) => group.peers)).toEqual([B, D]);
    // The generation-0 trainers, still publishing, never count.
    push(B, { epoch: 2, digest: digest("d"), generation: 1 });
    expect(reports(holdAll(2 * REPORT_AFTER_MS))).toEqual([]);
  });

  it("starts over on reset even to the generation it watches", () => {
    const { watch, clock, push, hold, holdAll } = setup();
    push(A, { epoch: 3, digest: digest("a") });
    push(B, { epoch: 3, digest: digest("b") });
    expect(hold(REPORT_AFTER_MS)).toMatchObject({ kind: "diverged" });
    watch.reset(0);
    expect(watch.current()).toBeNull();
    // Only what arrives from now on counts: A's digest alone is one model.
    push(A, { epoch: 3, digest: digest("a") });
    expect(watch.current()).toBeNull();
    // B's digest again, within clearAfterMs of the split before the reset: a new split, which
    // must last 15 s again.
    push(B, { epoch: 3, digest: digest("b") });
    const seen = clock.now;
    expect(watch.current()).toBeNull();
    expect(reports(holdAll(REPORT_AFTER_MS - 1))).toEqual([]);
    expect(hold(1)).toMatchObject({ kind: "diverged", since: seen });
  });

  it("starts a trainer's history over when it moves to another generation", () => {
    const { watch, push, hold, holdAll } = setup();
    watch.reset(2);
    // A still trains the rolled-back lineage: its digest of step 3 is of generation 0.
    push(A, { epoch: 3, digest: digest("a") });
    push(B, { epoch: 3, digest: digest("b"), generation: 2 });
    expect(reports(holdAll(REPORT_AFTER_MS))).toEqual([]);
    // A loads the rollback state and steps on: its generation-0 digests are no longer its own.
    push(A, { epoch: 5, digest: digest("a"), generation: 2 });
    expect(reports(holdAll(REPORT_AFTER_MS))).toEqual([]);
    push(A, { epoch: 3, digest: digest("c"), generation: 2 });
    expect(hold(REPORT_AFTER_MS)).toMatchObject({ kind: "diverged", step: 3 });
  });
});

describe("SplitWatch: reporting delay", () => {
  it("reports a split once it has been seen for 15 s, not a millisecond earlier, since it was first seen", () => {
    const { watch, clock, push, advance, holdAll } = setup();
    push(A, { epoch: 3, digest: digest("a") });
    push(B, { epoch: 3, digest: digest("b") });
    const seen = clock.now;
    expect(reports(holdAll(REPORT_AFTER_MS - 1))).toEqual([]);
    expect(clock.now).toBe(seen + REPORT_AFTER_MS - 1);
    advance(1);
    expect(watch.current()).toMatchObject({ kind: "diverged", step: 3, since: seen });
  });

  it("never reports a split gone before 15 s; one back after clearAfterMs must last 15 s anew", () => {
    const { watch, clock, push, advance, holdAll } = setup();
    push(A, { epoch: 3, digest: digest("a") });
    push(B, { epoch: 3, digest: digest("b") });
    expect(reports(holdAll(REPORT_AFTER_MS - 1))).toEqual([]);
    // B loads A's state, a millisecond before the split would have been reported.
    push(B, { epoch: 3, digest: digest("a") });
    advance(1);
    expect(watch.current()).toBeNull();
    expect(reports(holdAll(4 * REPORT_AFTER_MS))).toEqual([]);
    // It parts again: a new split.
    push(B, { epoch: 3, digest: digest("b") });
    const seen = clock.now;
    expect(reports(holdAll(REPORT_AFTER_MS - 1))).toEqual([]);
    advance(1);
    expect(watch.current()).toMatchObject({ kind: "diverged", since: seen });
  });

  it("takes reportAfterMs from the options", () => {
    const late = setup({ reportAfterMs: 5000 });
    late.push(A, { epoch: 3, digest: digest("a") });
    late.push(B, { epoch: 3, digest: digest("b") });
    const seen = late.clock.now;
    expect(reports(late.holdAll(4999))).toEqual([]);
    late.advance(1);
    expect(late.watch.current()).toMatchObject({ kind: "diverged", since: seen });
    const prompt = setup({ reportAfterMs: 0 });
    prompt.push(A, { epoch: 3, digest: digest("a") });
    prompt.push(B, { epoch: 3, digest: digest("b") });
    expect(prompt.watch.current()).toMatchObject({ kind: "diverged", since: prompt.clock.now });
  });
});

describe("SplitWatch: since", () => {
  it("keeps `since` across the reports of one split, and after a gap shorter than clearAfterMs", () => {
    const { watch, clock, push, hold } = setup({ clearAfterMs: 10_000 });
    push(A, { epoch: 3, digest: digest("a") });
    push(B, { epoch: 3, digest: digest("b") });
    const first = clock.now;
    expect(hold(REPORT_AFTER_MS)?.since).toBe(first);
    expect(hold(3000)?.since).toBe(first);
    push(A, { epoch: 4, digest: digest("c") });
    push(B, { epoch: 4, digest: digest("d") });
    expect(watch.current()).toMatchObject({ step: 4, since: first });
    // B loads A's state: gone, then back within clearAfterMs of the last time it was seen.
    push(B, { epoch: 4, digest: digest("c") });
    const lastSeen = clock.now;
    expect(watch.current()).toBeNull();
    expect(hold(10_000)).toBeNull();
    push(A, { epoch: 5, digest: digest("e") });
    push(B, { epoch: 5, digest: digest("f") });
    expect(clock.now - lastSeen).toBe(10_000);
    expect(watch.current()).toMatchObject({ step: 5, since: first });
  });

  it("starts `since` over once the split has been gone for longer than clearAfterMs", () => {
    const { watch, clock, push, hold } = setup({ clearAfterMs: 10_000 });
    push(A, { epoch: 3, digest: digest("a") });
    push(B, { epoch: 3, digest: digest("b") });
    const first = clock.now;
    expect(hold(REPORT_AFTER_MS)?.since).toBe(first);
    push(B, { epoch: 3, digest: digest("a") });
    expect(watch.current()).toBeNull();
    expect(hold(10_001)).toBeNull();
    push(B, { epoch: 3, digest: digest("b") });
    const again = clock.now;
    expect(again).toBe(first + REPORT_AFTER_MS + 10_001);
    expect(watch.current()).toBeNull();
    expect(hold(REPORT_AFTER_MS)).toMatchObject({ step: 3, since: again });
  });

  it("clears after 10 s by default", () => {
    const { watch, clock, push, advance, hold } = setup();
    push(A, { epoch: 3, digest: digest("a") });
    push(B, { epoch: 3, digest: digest("b") });
    const first = clock.now;
    expect(hold(REPORT_AFTER_MS)?.since).toBe(first);
    push(B, { epoch: 3, digest: digest("a") });
    expect(watch.current()).toBeNull();
    advance(CLEAR_AFTER_MS);
    push(A, { epoch: 3, digest: digest("a") });
    expect(watch.current()).toBeNull();
    push(B, { epoch: 3, digest: digest("b") });
    expect(watch.current()?.since).toBe(first);
    push(B, { epoch: 3, digest: digest("a") });
    expect(watch.current()).toBeNull();
    advance(CLEAR_AFTER_MS + 1);
    push(A, { epoch: 3, digest: digest("a") });
    expect(watch.current()).toBeNull();
    push(B, { epoch: 3, digest: digest("b") });
    expect(watch.current()).toBeNull();
    expect(hold(REPORT_AFTER_MS)?.since).toBe(clock.now - REPORT_AFTER_MS);
  });
});

describe("SplitWatch: bounds", () => {
  it("keeps historySteps digests per trainer, the latest ones", () => {
    const { push, history, hold } = setup({ historySteps: 3 });
    history(A, 1, 5, one);
    // A no longer holds its digest of step 2: nothing to compare B's with.
    push(B, { epoch: 2, digest: other(2) });
    expect(hold(REPORT_AFTER_MS)).toBeNull();
    // Step 3 is still kept.
    push(C, { epoch: 3, digest: other(3) });
    expect(hold(REPORT_AFTER_MS)).toMatchObject({ kind: "diverged", step: 3 });
  });

  it("keeps 64 steps by default", () => {
    const { push, history, hold } = setup();
    history(A, 1, 65, one);
    push(B, { epoch: 1, digest: other(1) });
    expect(hold(REPORT_AFTER_MS)).toBeNull();
    push(C, { epoch: 2, digest: other(2) });
    expect(hold(REPORT_AFTER_MS)).toMatchObject({ kind: "diverged", step: 2 });
  });

  it("compares at most maxCompared trainers, the first by PeerId", () => {
    const { push, hold } = setup({ maxCompared: 2 });
    push(C, { epoch: 3, digest: digest("c") });
    push(B, { epoch: 3, digest: digest("a") });
    push(A, { epoch: 3, digest: digest("a") });
    expect(hold(REPORT_AFTER_MS)).toBeNull();
    push(B, { epoch: 3, digest: digest("b") });
    expect(hold(REPORT_AFTER_MS)?.groups.flatMap((group) => group.peers)).toEqual([A, B]);
  });

  it("compares 64 trainers by default", () => {
    const { push, hold } = setup();
    for (let i = 0; i < 65; i++) push(peer(i), { epoch: 3, digest: i === 64 ? digest("b") : digest("a") });
    expect(hold(REPORT_AFTER_MS)).toBeNull();
    push(peer(63), { epoch: 3, digest: digest("b") });
    expect(hold(REPORT_AFTER_MS)?.groups).toEqual([
      { digest: digest("a"), peers: Array.from({ length: 63 }, (_, i) => peer(i)) },
      { digest: digest("b"), peers: [peer(63)] },
    ]);
  });

  /** A 16-hex-digit digest per index, in index order. */
  const hex = (index: number): string => index.toString(16).padStart(16, "0");

  it("reports at most 16 sides, and describes 8 of them in the summary", () => {
    const { push, hold } = setup();
    for (let i = 0; i < 20; i++) push(peer(i), { epoch: 8, digest: hex(i) });
    const split = hold(REPORT_AFTER_MS);
    expect(split?.groups).toEqual(
      Array.from({ length: 16 }, (_, i) => ({ digest: hex(i), peers: [peer(i)] })),
    );
    expect(split?.summary).toBe(
      `20 different models at step 8: ${Array.from({ length: 8 }, (_, i) => `1 trainer with ${hex(i)}`).join(", ")}, 12 more`,
    );
  });

  it("names at most 64 trainers per side, and counts them all in the summary", () => {
    const { push, hold } = setup({ maxCompared: 200 });
    for (let i = 0; i < 130; i++) push(peer(i), { epoch: 3, digest: i < 100 ? digest("a") : digest("b") });
    expect(hold(REPORT_AFTER_MS)).toEqual({
      kind: "diverged",
      step: 3,
      since: expect.any(Number) as unknown,
      groups: [
        { digest: digest("a"), peers: Array.from({ length: 64 }, (_, i) => peer(i)) },
        { digest: digest("b"), peers: Array.from({ length: 30 }, (_, i) => peer(100 + i)) },
      ],
      summary: `2 different models at step 3: 100 trainers with ${digest("a")}, 30 trainers with ${digest("b")}`,
    });
  });

  it("keeps the summary within 1,000 characters at its longest", () => {
    // Diverged: every trainer compared holds a model of its own, at the largest step.
    const many = setup({ maxCompared: 1000 });
    const last = 2 ** 31 - 1;
    for (let i = 0; i < 1000; i++) many.push(peer(i), { epoch: last, digest: hex(i) });
    const split = many.hold(REPORT_AFTER_MS);
    expect(split).toMatchObject({ kind: "diverged", step: last });
    expect(split?.groups).toHaveLength(16);
    expect(split?.summary).toMatch(/^1000 different models at step 2147483647: .*, 992 more$/);
    expect(split?.summary.length).toBeLessThanOrEqual(1000);
    // Alone: the most solo steps, with all 63 other trainers compared training.
    const lone = setup();
    const others = Array.from({ length: 63 }, (_, i) => peer(i));
    const alone = lone.train(46, others, peer(63), () => last).at(-1);
    expect(alone?.groups.map((group) => group.peers)).toEqual([others, [peer(63)]]);
    expect(alone?.summary).toContain(`has taken ${last} steps in a row`);
    expect(alone?.summary).toContain("while 63 others train");
    expect(alone?.summary.length).toBeLessThanOrEqual(1000);
  });
});

describe("SplitWatch: what a split must show before it is reported", () => {
  it("does not report a split that comes and goes, however often", () => {
    const { watch, push, advance } = setup();
    const answers: Array<SplitReport | null> = [];
    // Two models at steps 1, 3, 5 …, one model at steps 2, 4, 6 …: a fork healed at every other look.
    for (let at = 1; at <= 60; at++) {
      advance(1000);
      push(A, { epoch: at, digest: one(at) });
      push(B, { epoch: at, digest: at % 2 === 1 ? other(at) : one(at) });
      answers.push(watch.current());
    }
    expect(reports(answers)).toEqual([]);
  });

  it("counts a few epochs between two records as steps, and times a new solo run from its own start", () => {
    const { watch, push, advance } = setup();
    const answers: Array<SplitReport | null> = [];
    // The other trainer's records arrive every 3 steps (a fast swarm, sampled records); A's solo
    // run ends once (its count falls, though the record of the shared step was missed) at 20 s.
    for (let second = 1; second <= 80; second++) {
      advance(1000);
      push(B, { epoch: 3 * second, soloSteps: 0 });
      push(A, { epoch: 100 + second, soloSteps: second <= 20 ? 10 + second : second - 20 });
      answers.push(watch.current());
    }
    // A's new run begins at 21 s and lasts its 30 s at 51 s; then 15 s more (timed from the first
    // run's start, it would be reported at 45 s).
    const first = answers.findIndex((answer) => answer !== null);
    expect(first + 1).toBe(21 + ALONE_FOR_MS / 1000 + REPORT_AFTER_MS / 1000);
    expect(answers.at(-1)).toMatchObject({ kind: "alone", groups: [{ peers: [B] }, { peers: [A] }] });
  });

  it("does not count another trainer that stepped twice long ago and only publishes since", () => {
    const { watch, push, advance } = setup();
    push(B, { epoch: 1, soloSteps: 0 });
    push(A, { epoch: 1, soloSteps: 10 });
    advance(1000);
    push(B, { epoch: 2, soloSteps: 0 });
    advance(1000);
    push(B, { epoch: 3, soloSteps: 0 });
    const answers: Array<SplitReport | null> = [];
    for (let second = 1; second <= 120; second++) {
      advance(1000);
      // B stalls at epoch 3 but keeps publishing; A steps alone all along.
      push(B, { epoch: 3, soloSteps: 0 });
      push(A, { epoch: 1 + second, soloSteps: 10 + second });
      answers.push(watch.current());
    }
    const last = answers.slice(-30);
    expect(reports(last)).toEqual([]);
  });
});
