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

/** The aux's monitor parts, as run-aux builds them, on one fake clock; records arrive at its time. */
function setup(options: { exact?: boolean; maxRefusals?: number } = {}) {
  const clock = { now: 1_700_000_000_000 };
  const now = () => clock.now;
  const aggregator = new StepAggregator({ ttlMs: TTL, graceMs: 2500, now, averagingWindowMs: MINUTE });
  const splits = new SplitWatch({ ttlMs: TTL, exact: () => options.exact ?? true, now });
  const refusals = new RefusalLog({
    now,
    ...(options.maxRefusals === undefined ? {} : { maxPeers: options.maxRefusals }),
  });
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
  const heartbeat = () => swarmHeartbeat({ aggregator, splits, refusals, now: clock.now });
  return { clock, aggregator, splits, refusals, push, advance, heartbeat };
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

  it("carries the split while the aux sees one, and null once the trainers hold one model again", () => {
    const { clock, push, advance, heartbeat } = setup();
    push(A, { epoch: 4, stateHash: { epoch: 4, digest: digest("a") } });
    push(B, { epoch: 4, stateHash: { epoch: 4, digest: digest("b") } });
    push(C, { epoch: 4, stateHash: { epoch: 4, digest: digest("a") } });
    const since = clock.now;
    const body = heartbeat();
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
    advance(5000);
    push(A, { epoch: 4, stateHash: { epoch: 4, digest: digest("a") } });
    push(C, { epoch: 4, stateHash: { epoch: 4, digest: digest("a") } });
    expect(heartbeat().split?.since).toBe(since);
    // B loads the swarm's state.
    push(B, { epoch: 4, stateHash: { epoch: 4, digest: digest("a") } });
    expect(heartbeat().split).toBeNull();
  });

  it("carries a trainer alone while others train, in a shape the platform takes", () => {
    const { push, advance, heartbeat } = setup({ exact: false });
    // C steps alone for 40 s while A and B train together.
    for (let second = 1; second <= 40; second++) {
      advance(1000);
      push(A, { epoch: 10 + second, soloSteps: 0 });
      push(B, { epoch: 10 + second, soloSteps: 0 });
      push(C, { epoch: 12 + second, soloSteps: 12 + second });
    }
    const body = heartbeat();
    expect(body.split).toMatchObject({
      kind: "alone",
      step: 52,
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
      split: null,
    });
    expect(platformParse(body)).toEqual(body);
  });

  it("stays within the platform's limits at its largest: the most trainers, refusals and the longest reasons", () => {
    const { push, refusals, heartbeat } = setup({ maxRefusals: 400 });
    for (let i = 0; i < MAX_HEARTBEAT_TRAINERS + 10; i++) push(peer(i), { epoch: 3, samplesTotal: 0 });
    for (let i = 0; i < 300; i++) refusals.record(peer(i), "PASS_WRONG_EXPERIMENT", "r".repeat(2_000));
    const body = heartbeat();
    expect(body.trainers).toHaveLength(MAX_HEARTBEAT_TRAINERS);
    expect(body.refused).toHaveLength(MAX_HEARTBEAT_REFUSALS);
    expect(body.refused.every((refusal) => refusal.reason.length === 512)).toBe(true);
    expect(platformParse(body)).toEqual(body);
    expect(Buffer.byteLength(JSON.stringify(body))).toBeLessThanOrEqual(MAX_HEARTBEAT_BODY_BYTES);
  });

  it("passes the platform's schema when more trainers than 16 hold different models at one step", () => {
    // A swarm averaged in one group of up to `maxGroupSize` (as high as 1024) is compared exactly;
    // 17 trainers cut off from each other each train a model of their own.
    const { push, heartbeat } = setup();
    for (let i = 0; i < 17; i++) {
      push(peer(i), { epoch: 8, stateHash: { epoch: 8, digest: i.toString(16).padStart(16, "0") } });
    }
    const body = heartbeat();
    expect(body.split?.kind).toBe("diverged");
    platformParse(body);
  });
});
