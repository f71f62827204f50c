import { RefusalLog, type PeerProgressRecord, type ProgressRecord } from "@barnraise/swarm";
import { describe, expect, it } from "vitest";
// The platform's own schema of the heartbeat: the aux's body must pass it, so the two cannot drift apart.
import {
  MAX_HEARTBEAT_BODY_BYTES,
  MAX_HEARTBEAT_REFUSALS,
  MAX_HEARTBEAT_TRAINERS,
  swarmStatusReportSchema,
} from "../../../web/src/api/schemas/peer.ts";
import { swarmHeartbeat } from "../../src/monitor/heartbeat.ts";
import { ImplausibleRecords } from "../../src/monitor/implausible-records.ts";
import { SplitWatch } from "../../src/monitor/split-watch.ts";
import { StepAggregator } from "../../src/monitor/step-aggregator.ts";

const TTL = 5000;
const MINUTE = 60_000;
const BASE58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";

/** A libp2p-like PeerId (base58btc, 52 characters); ids sort in index order. */
function peer(index: number): string {
  const digits = [Math.floor(index / (58 * 58)), Math.floor(index / 58) % 58, index % 58];
  return `12D3KooW${"Q".repeat(41)}${digits.map((digit) => BASE58.charAt(digit)).join("")}`;
}

const [A, B, C, X] = [peer(0), peer(1), peer(2), peer(3)];

/** How long the split watch waits before it reports a split (its default, as run-aux uses it). */
const REPORT_AFTER_MS = 15_000;
/** How often the aux posts its heartbeat. */
const HEARTBEAT_MS = 5000;

/** The aux's monitor parts, as run-aux builds them, on one fake clock; records arrive at its time. */
function setup(options: { maxRefusals?: number } = {}) {
  const clock = { now: 1_700_000_000_000 };
  const now = () => clock.now;
  const aggregator = new StepAggregator({ ttlMs: TTL, graceMs: 2500, now, averagingWindowMs: MINUTE });
  const splits = new SplitWatch({ ttlMs: TTL, now });
  const refusals = new RefusalLog({
    now,
    ...(options.maxRefusals === undefined ? {} : { maxPeers: options.maxRefusals }),
  });
  const implausible = new ImplausibleRecords(now);
  const push = (peerId: string, fields: Partial<ProgressRecord> & Pick<ProgressRecord, "epoch">): void => {
    const mode = fields.mode ?? "node";
    const record: ProgressRecord = {
      samplesAccumulated: 0,
      samplesPerSecond: mode === "aux" ? 0 : 10,
      time: clock.now,
      mode,
      lossSum: 0,
      minibatches: 0,
      step: fields.epoch,
      bytesAggregated: 0,
      ...fields,
    };
    const update: PeerProgressRecord = {
      peerId,
      username: `user-${peerId.slice(-3)}`,
      role: mode === "aux" ? "aux" : "trainer",
      record,
      receivedAt: clock.now,
    };
    aggregator.observe(update);
    splits.observe(update);
  };
  const advance = (ms: number): void => {
    clock.now += ms;
  };
  const heartbeat = () => swarmHeartbeat({ aggregator, splits, refusals, implausible, now: clock.now });
  /**
   * The heartbeats over `ms`: one now, then one every 5 s, each once `publish` has had the trainers
   * publish their records again (their records live 5 s). Returns every body, the latest last.
   */
  const beats = (ms: number, publish: () => void): Array<ReturnType<typeof heartbeat>> => {
    const bodies = [heartbeat()];
    for (let held = 0; held < ms; held += HEARTBEAT_MS) {
      advance(HEARTBEAT_MS);
      publish();
      bodies.push(heartbeat());
    }
    return bodies;
  };
  return { clock, aggregator, splits, refusals, implausible, push, advance, heartbeat, beats };
}

/** Parses `body` as the platform does; the output must be the body itself, nothing dropped or added. */
function platformParse(body: unknown) {
  const result = swarmStatusReportSchema.safeParse(JSON.parse(JSON.stringify(body)));
  expect(result.error?.issues ?? []).toEqual([]);
  return result.data;
}

function digest(hex: string): string {
  return hex.repeat(16);
}

/** A 16-hex-digit digest per index. */
function hex(index: number): string {
  return index.toString(16).padStart(16, "0");
}

describe("swarmHeartbeat", () => {
  it("lists the fresh trainers with their averaging verdicts, not aux peers, with the step and liveness", () => {
    const { clock, push, advance, heartbeat } = setup();
    // A puts samples into steps; B trains for over a minute and puts none; C just came.
    push(A, { epoch: 6, samplesTotal: 0 });
    push(B, { epoch: 6, samplesTotal: 0 });
    for (let second = 1; second <= 61; second++) {
      advance(1000);
      push(A, { epoch: 7, samplesTotal: 64 * second, samplesPerSecond: 20 });
      push(B, { epoch: 7, samplesTotal: 0, samplesPerSecond: 5 });
      push(X, { epoch: 7, mode: "aux", bytesAggregated: second });
    }
    push(C, { epoch: 7, samplesPerSecond: 7 });
    const stale = peer(9);
    push(stale, { epoch: 9 });
    advance(TTL);
    push(A, { epoch: 7, samplesTotal: 64 * 62, samplesPerSecond: 20 });
    push(B, { epoch: 7, samplesTotal: 0, samplesPerSecond: 5 });
    push(C, { epoch: 7, samplesPerSecond: 7 });
    advance(1);
    const body = heartbeat();
    expect(body).toEqual({
      // B does not average: it is not counted alive, but listed with its verdict.
      alivePeers: 2,
      samplesPerSecond: 32,
      step: 7,
      time: clock.now,
      trainers: expect.arrayContaining([
        { peerId: A, averaging: true },
        { peerId: B, averaging: false },
        { peerId: C },
      ]) as unknown,
      refused: [],
      implausible: [],
      split: null,
    });
    expect(body.trainers).toHaveLength(3);
    expect(body.trainers.map((trainer) => trainer.peerId)).not.toContain(X);
    expect(body.trainers.map((trainer) => trainer.peerId)).not.toContain(stale);
    expect(platformParse(body)).toEqual(body);
  });

  it("lists the refusals of the last minute only, newest first, as the platform names their fields", () => {
    const { clock, refusals, advance, heartbeat } = setup();
    refusals.record(A, "PASS_EXPIRED", "too old for the heartbeat");
    advance(1);
    refusals.record(B, "PASS_REVOKED", "the token this node joined with was revoked");
    const bAt = clock.now;
    advance(30_000);
    refusals.record(C, "PASS_BAD_SIGNATURE", "pass signature invalid");
    const cAt = clock.now;
    advance(MINUTE - 30_000);
    // A's refusal is a minute and a millisecond old; B's exactly a minute.
    const body = heartbeat();
    expect(body.refused).toEqual([
      { peerId: C, code: "PASS_BAD_SIGNATURE", reason: "pass signature invalid", at: cAt },
      { peerId: B, code: "PASS_REVOKED", reason: "the token this node joined with was revoked", at: bAt },
    ]);
    expect(platformParse(body)).toEqual(body);
    // A peer that showed a valid pass since is not listed.
    refusals.forget(C);
    expect(heartbeat().refused.map((refusal) => refusal.peerId)).toEqual([B]);
  });

  it("lists at most the 256 newest refusals", () => {
    const { refusals, advance, heartbeat } = setup({ maxRefusals: 400 });
    for (let i = 0; i < 300; i++) {
      refusals.record(peer(i), "PASS_EXPIRED", `pass ${i} expired`);
      advance(10);
    }
    const body = heartbeat();
    expect(body.refused).toHaveLength(256);
    expect(MAX_HEARTBEAT_REFUSALS).toBe(256);
    expect(body.refused[0]?.peerId).toBe(peer(299));
    expect(body.refused.at(-1)?.peerId).toBe(peer(44));
    expect(platformParse(body)).toEqual(body);
  });

  it("carries the split once it has lasted 15 s, since when it was first seen, and null once the trainers hold one model again", () => {
    const { clock, push, advance, heartbeat, beats } = setup();
    /** A and C hold one model; B holds `b`'s. */
    const publish = (b: string): void => {
      push(A, { epoch: 4, stateHash: { epoch: 4, digest: digest("a") } });
      push(B, { epoch: 4, stateHash: { epoch: 4, digest: b } });
      push(C, { epoch: 4, stateHash: { epoch: 4, digest: digest("a") } });
    };
    publish(digest("b"));
    const since = clock.now;
    // Heartbeats at 0, 5 and 10 s carry no split yet, nor one a millisecond before 15 s.
    const early = beats(REPORT_AFTER_MS - HEARTBEAT_MS, () => {
      publish(digest("b"));
    });
    expect(early.map((body) => body.split)).toEqual([null, null, null]);
    advance(HEARTBEAT_MS - 1);
    expect(heartbeat().split).toBeNull();
    advance(1);
    const body = heartbeat();
    expect(clock.now - since).toBe(REPORT_AFTER_MS);
    expect(body.split).toEqual({
      kind: "diverged",
      step: 4,
      since,
      groups: [
        { digest: digest("a"), peers: [A, C] },
        { digest: digest("b"), peers: [B] },
      ],
      summary: `2 different models at step 4: 2 trainers with ${digest("a")}, 1 trainer with ${digest("b")}`,
    });
    expect(platformParse(body)).toEqual(body);
    advance(HEARTBEAT_MS);
    publish(digest("b"));
    expect(heartbeat().split?.since).toBe(since);
    // B loads the swarm's state.
    publish(digest("a"));
    expect(heartbeat().split).toBeNull();
  });

  it("carries a trainer alone while others train over a grid, in a shape the platform takes", () => {
    const { clock, push, advance, heartbeat } = setup();
    // C steps alone while A and B train together, each in its own group of a Moshpit grid: their
    // digests differ at every step, and are not compared.
    const bodies: Array<ReturnType<typeof heartbeat>> = [];
    for (let second = 1; second <= 50; second++) {
      advance(1000);
      const grid = (hex: string) => ({ epoch: 10 + second, digest: digest(hex), grid: true });
      push(A, { epoch: 10 + second, soloSteps: 0, stateHash: grid("a") });
      push(B, { epoch: 10 + second, soloSteps: 0, stateHash: grid("b") });
      push(C, { epoch: 12 + second, soloSteps: 12 + second, stateHash: grid("c") });
      if (second % 5 === 0) bodies.push(heartbeat());
    }
    // Alone from 30 s after its first solo record (the heartbeat of 35 s sees it), reported 15 s later.
    expect(bodies.map((body) => body.split?.kind ?? null)).toEqual([...Array<null>(9).fill(null), "alone"]);
    const body = bodies.at(-1);
    expect(body?.split).toMatchObject({
      kind: "alone",
      step: 62,
      since: clock.now - REPORT_AFTER_MS,
      groups: [
        { digest: null, peers: [A, B] },
        { digest: null, peers: [C] },
      ],
    });
    expect(platformParse(body)).toEqual(body);
  });

  it("passes the platform's schema for an empty swarm", () => {
    const { clock, heartbeat } = setup();
    const body = heartbeat();
    expect(body).toEqual({
      alivePeers: 0,
      samplesPerSecond: 0,
      step: 0,
      time: clock.now,
      trainers: [],
      refused: [],
      implausible: [],
      split: null,
    });
    expect(platformParse(body)).toEqual(body);
  });

  it("stays within the platform's limits at its largest: the most trainers, refusals, reasons and sides", () => {
    const { push, refusals, heartbeat, beats } = setup({ maxRefusals: 400 });
    // Every trainer holds a model of its own at the largest step; 64 of them are compared.
    const step = 2 ** 31 - 1;
    const publish = (): void => {
      for (let i = 0; i < MAX_HEARTBEAT_TRAINERS + 10; i++) {
        push(peer(i), { epoch: step, samplesTotal: 0, stateHash: { epoch: step, digest: hex(i) } });
      }
    };
    publish();
    for (let i = 0; i < 300; i++) refusals.record(peer(i), "PASS_WRONG_EXPERIMENT", "r".repeat(2_000));
    expect(beats(REPORT_AFTER_MS - HEARTBEAT_MS, publish).map((body) => body.split)).toEqual([
      null,
      null,
      null,
    ]);
    const [body] = beats(HEARTBEAT_MS, publish).slice(-1);
    expect(body?.trainers).toHaveLength(MAX_HEARTBEAT_TRAINERS);
    expect(body?.refused).toHaveLength(MAX_HEARTBEAT_REFUSALS);
    expect(body?.refused.every((refusal) => refusal.reason.length === 512)).toBe(true);
    expect(body?.split).toMatchObject({ kind: "diverged", step });
    expect(body?.split?.groups).toHaveLength(16);
    expect(platformParse(body)).toEqual(body);
    expect(Buffer.byteLength(JSON.stringify(body))).toBeLessThanOrEqual(MAX_HEARTBEAT_BODY_BYTES);
    expect(heartbeat().split).not.toBeNull();
  });

  it("passes the platform's schema when more trainers than 16 hold different models at one step", () => {
    // 17 trainers cut off from each other each train a model of their own, for 15 s and more.
    const { push, beats } = setup();
    const publish = (): void => {
      for (let i = 0; i < 17; i++) push(peer(i), { epoch: 8, stateHash: { epoch: 8, digest: hex(i) } });
    };
    publish();
    const bodies = beats(REPORT_AFTER_MS, publish);
    expect(bodies.map((body) => body.split === null)).toEqual([true, true, true, false]);
    const body = bodies.at(-1);
    expect(body?.split?.kind).toBe("diverged");
    expect(body?.split?.groups).toHaveLength(16);
    expect(body?.split?.summary).toMatch(/^17 different models at step 8: .*, 9 more$/);
    expect(platformParse(body)).toEqual(body);
  });

  it("passes the platform's schema when a trainer is alone while the most trainers compared train", () => {
    const { push, advance, heartbeat } = setup();
    // 63 trainers train together; the 64th (the last compared) steps alone, the most steps in a row.
    const others = Array.from({ length: 63 }, (_, i) => peer(i));
    const lone = peer(63);
    let body = heartbeat();
    for (let second = 1; second <= 50; second++) {
      advance(1000);
      for (const peerId of others) push(peerId, { epoch: second, soloSteps: 0 });
      push(lone, { epoch: 1000 + second, soloSteps: 2 ** 31 - 1 });
      body = heartbeat();
    }
    expect(body.split).toMatchObject({ kind: "alone", groups: [{ peers: others }, { peers: [lone] }] });
    expect(platformParse(body)).toEqual(body);
  });

  it("reports the trainers whose records were refused as implausible in the last minute, with the reason and count", () => {
    const { implausible, advance, heartbeat } = setup();
    implausible.record({
      peerId: A,
      username: "mallory",
      reason: "samplesTotal 2^47 grew by more …",
      count: 1,
    });
    advance(30_000);
    implausible.record({ peerId: B, username: "mallory", reason: "epoch 1000050 is past 54", count: 1 });
    implausible.record({ peerId: A, username: "mallory", reason: "samplesPerSecond 1e9 …", count: 2 });
    const body = heartbeat();
    expect(body.implausible).toEqual([
      { peerId: A, reason: "samplesPerSecond 1e9 …", count: 2, at: body.time },
      { peerId: B, reason: "epoch 1000050 is past 54", count: 1, at: body.time },
    ]);
    expect(platformParse(body)).toEqual(body);
    advance(MINUTE + 1);
    expect(heartbeat().implausible).toEqual([]);
  });
});
