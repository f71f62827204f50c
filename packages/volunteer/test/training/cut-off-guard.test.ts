import { AccessPassVerifier, ProtocolErrorCode, REVOKED_GRANT_REASON } from "@barnraise/protocol";
import { nodeCrypto } from "@barnraise/protocol/node";
import type { Refusal } from "@barnraise/swarm";
import { describe, expect, it } from "vitest";
import {
  CutOffGuard,
  DEFAULT_CUT_OFF_AFTER_MS,
  refusalAdvice,
  type CutOffEvidence,
  type CutOffGuardOptions,
} from "../../src/training/cut-off-guard.ts";

const CUT_OFF_AFTER = 60_000;
const CLEAR_AFTER = 10_000;

/** What the peer knows about the swarm, set by hand: the guard reads it through CutOffEvidence. */
class FakeEvidence implements CutOffEvidence {
  /** Newest first, as RefusalLog.recent() gives them. */
  refused: Refusal[] = [];
  members = false;
  aux = false;
  listed = false;
  alive: number | undefined = undefined;

  refusals(): readonly Refusal[] {
    return this.refused;
  }
  hasMembers(): boolean {
    return this.members;
  }
  auxConnected(): boolean {
    return this.aux;
  }
  auxListed(): boolean {
    return this.listed;
  }
  platformAlivePeers(): number | undefined {
    return this.alive;
  }
}

/** A guard over fake evidence, a fake clock and a solo-step counter the test sets. */
function setup(options: Partial<Omit<CutOffGuardOptions, "evidence" | "soloSteps" | "now">> = {}) {
  const clock = { now: 1_700_000_000_000 };
  const evidence = new FakeEvidence();
  const solo = { steps: 0 };
  const guard = new CutOffGuard({
    evidence,
    soloSteps: () => solo.steps,
    cutOffAfterMs: CUT_OFF_AFTER,
    clearAfterMs: CLEAR_AFTER,
    now: () => clock.now,
    ...options,
  });
  const advance = (ms: number): void => {
    clock.now += ms;
  };
  /** A member refuses this node's pass now (every hello is refused again while it lasts). */
  const refuse = (code: string, reason: string): void => {
    evidence.refused = [{ peer: "12D3KooWRefuser", code, reason, at: clock.now }];
  };
  /** Checks every `stepMs` for `ms`, as the peer's loop does; returns every verdict. */
  const checkFor = (ms: number, stepMs = 5_000) => {
    const verdicts = [];
    for (let t = 0; t < ms; t += stepMs) {
      verdicts.push(guard.check());
      advance(Math.min(stepMs, ms - t));
    }
    return verdicts;
  };
  return { guard, clock, evidence, solo, advance, refuse, checkFor };
}

/** The platform's real revocation reasons: a ban of the user, and a revoked token. */
function revocationReasons(): { banned: string; revokedToken: string } {
  const verifier = new AccessPassVerifier({
    crypto: nodeCrypto,
    authorityPublicKey: new Uint8Array(32),
    experimentId: "exp",
  });
  verifier.setRevoked({ usernames: ["mallory"], grants: ["grant-1"] });
  const banned = verifier.revocationOf({ username: "mallory", grant: "grant-2" });
  const revokedToken = verifier.revocationOf({ username: "alice", grant: "grant-1" });
  if (banned === undefined || revokedToken === undefined) throw new Error("nothing was revoked");
  return { banned, revokedToken };
}

const REFUSED_REASON = REVOKED_GRANT_REASON;
const NEW_TOKEN_ADVICE = "create a new token on the experiment's page and restart the node with it";

describe("CutOffGuard", () => {
  it("never cuts off a volunteer that steps alone with nothing saying others train", () => {
    const { guard, solo, evidence, checkFor } = setup();
    solo.steps = 1;
    for (let i = 0; i < 5; i++) {
      solo.steps += 10;
      expect(checkFor(2 * CUT_OFF_AFTER)).toEqual(Array(24).fill({ cutOff: false }));
    }
    expect(guard.held).toBe(false);
    // The platform lists aux peers it does not reach, but nobody else trains, or nobody says.
    evidence.listed = true;
    evidence.alive = 0;
    expect(checkFor(2 * CUT_OFF_AFTER)).toEqual(Array(24).fill({ cutOff: false }));
    evidence.alive = undefined;
    expect(checkFor(2 * CUT_OFF_AFTER)).toEqual(Array(24).fill({ cutOff: false }));
    expect(guard.held).toBe(false);
  });

  it("says members refuse its pass, with what to do, and cuts it off only after cutOffAfterMs of solo steps", () => {
    const { guard, solo, advance, refuse } = setup();
    const advice = NEW_TOKEN_ADVICE;
    refuse(ProtocolErrorCode.PASS_REVOKED, REFUSED_REASON);
    // Before any solo step: refused, not cut off.
    expect(guard.check()).toEqual({
      cutOff: false,
      refused: `refused by the swarm: ${REFUSED_REASON} — ${advice}`,
    });
    solo.steps = 1;
    expect(guard.check().cutOff).toBe(false); // the solo clock starts here
    for (let elapsed = 5_000; elapsed < CUT_OFF_AFTER; elapsed += 5_000) {
      advance(5_000);
      solo.steps += 1;
      refuse(ProtocolErrorCode.PASS_REVOKED, REFUSED_REASON);
      expect(guard.check()).toEqual({
        cutOff: false,
        refused: `refused by the swarm: ${REFUSED_REASON} — ${advice}`,
      });
    }
    advance(4_999);
    refuse(ProtocolErrorCode.PASS_REVOKED, REFUSED_REASON);
    expect(guard.check().cutOff).toBe(false);
    expect(guard.held).toBe(false);
    advance(1);
    const verdict = guard.check();
    expect(verdict).toMatchObject({
      cutOff: true,
      reason: `refused by the swarm: ${REFUSED_REASON}`,
      advice,
    });
    expect(guard.held).toBe(true);
  });

  it("cuts off after two minutes by default, and a refusal counts for 30 s by default", () => {
    expect(DEFAULT_CUT_OFF_AFTER_MS).toBe(2 * 60_000);
    const { guard, solo, advance, refuse } = setup({ cutOffAfterMs: undefined, clearAfterMs: undefined });
    solo.steps = 1;
    refuse(ProtocolErrorCode.PASS_EXPIRED, "pass expired");
    expect(guard.check().cutOff).toBe(false);
    advance(30_000);
    // 30 s old: still counts.
    expect(guard.check()).toMatchObject({
      cutOff: false,
      refused: expect.stringContaining("pass expired") as unknown,
    });
    advance(1);
    expect(guard.check()).toEqual({ cutOff: false });
    // The evidence must hold for the whole two minutes, not only the solo steps: the members
    // refuse the peer again and again (it keeps knocking) from now on.
    refuse(ProtocolErrorCode.PASS_EXPIRED, "pass expired");
    expect(guard.check().cutOff).toBe(false);
    for (let waited = 0; waited + 20_000 < DEFAULT_CUT_OFF_AFTER_MS; waited += 20_000) {
      advance(20_000);
      refuse(ProtocolErrorCode.PASS_EXPIRED, "pass expired");
      expect(guard.check().cutOff).toBe(false);
    }
    advance(DEFAULT_CUT_OFF_AFTER_MS - 5 * 20_000 - 1);
    expect(guard.check().cutOff).toBe(false);
    advance(1);
    expect(guard.check().cutOff).toBe(true);
  });

  it("does not count a refusal older than clearAfterMs, boundary included", () => {
    const { guard, solo, advance, refuse, checkFor } = setup();
    solo.steps = 5;
    refuse(ProtocolErrorCode.PASS_REVOKED, REFUSED_REASON);
    expect(guard.check().cutOff).toBe(false);
    advance(CLEAR_AFTER);
    expect(guard.check()).toMatchObject({ refused: expect.stringContaining(REFUSED_REASON) as unknown });
    advance(1);
    expect(guard.check()).toEqual({ cutOff: false });
    // Long past the cut-off time, a stale refusal alone holds nothing.
    expect(checkFor(3 * CUT_OFF_AFTER).every((verdict) => !verdict.cutOff)).toBe(true);
    expect(guard.held).toBe(false);
  });

  it("looks past stale refusals to a fresh one", () => {
    const { guard, solo, clock, evidence } = setup();
    solo.steps = 1;
    evidence.refused = [
      { peer: "b", code: "PASS_EXPIRED", reason: "stale", at: clock.now - 2 * CLEAR_AFTER },
      { peer: "a", code: "PASS_BAD_SIGNATURE", reason: "fresh", at: clock.now - 1 },
    ];
    expect(guard.check()).toMatchObject({
      refused: expect.stringContaining(
        "refused by the swarm: its pass is signed by a key the swarm does not trust",
      ) as unknown,
    });
  });

  it("says why in its own words, never the refusing member's", () => {
    const { guard, solo, refuse } = setup();
    solo.steps = 1;
    refuse(ProtocolErrorCode.PASS_REVOKED, "\x1b[2J re-enter your token at https://evil.example");
    const verdict = guard.check();
    expect(verdict).toMatchObject({ cutOff: false });
    const note = verdict.cutOff ? "" : (verdict.refused ?? "");
    expect(note).toBe(
      "refused by the swarm: its pass was revoked — create a new token on the experiment's page and restart the node with it",
    );
    expect(note).not.toContain("evil");
  });

  it("neither says refused nor cuts off while it has a member: one refused, another took it", () => {
    const { guard, solo, evidence, advance, refuse } = setup();
    evidence.members = true;
    solo.steps = 1;
    for (let elapsed = 0; elapsed <= 3 * CUT_OFF_AFTER; elapsed += 5_000) {
      refuse(ProtocolErrorCode.PASS_REVOKED, REFUSED_REASON);
      solo.steps += 1;
      expect(guard.check()).toEqual({ cutOff: false });
      advance(5_000);
    }
    expect(guard.held).toBe(false);
    // Once it has no member left (and its last step was shared), the same refusal is shown.
    evidence.members = false;
    solo.steps = 0;
    refuse(ProtocolErrorCode.PASS_REVOKED, REFUSED_REASON);
    expect(guard.check()).toMatchObject({
      cutOff: false,
      refused: expect.stringContaining(REFUSED_REASON) as unknown,
    });
  });

  it("is not cut off while it takes no solo steps, however long it is refused", () => {
    const { guard, advance, refuse } = setup();
    for (let elapsed = 0; elapsed <= 3 * CUT_OFF_AFTER; elapsed += 5_000) {
      refuse(ProtocolErrorCode.PASS_REVOKED, REFUSED_REASON);
      expect(guard.check().cutOff).toBe(false);
      advance(5_000);
    }
    expect(guard.held).toBe(false);
  });

  it("cuts off a peer that reaches none of the listed aux peers while the platform says others train", () => {
    const { guard, solo, evidence, checkFor } = setup();
    evidence.listed = true;
    evidence.alive = 3;
    solo.steps = 1;
    // Nothing for the status line before the cut-off: no member refused it.
    expect(checkFor(CUT_OFF_AFTER)).toEqual(Array(12).fill({ cutOff: false }));
    const verdict = guard.check();
    expect(verdict).toEqual({
      cutOff: true,
      reason: "the swarm trains (3 peers alive) but this peer reaches none of its aux peers",
      advice:
        "check that this machine can reach the aux peer's address (a firewall or proxy in the way); it keeps trying",
    });
    expect(guard.held).toBe(true);
  });

  it("says one peer alive in the singular", () => {
    const { guard, solo, evidence, checkFor } = setup();
    Object.assign(evidence, { listed: true, alive: 1 });
    solo.steps = 1;
    checkFor(CUT_OFF_AFTER);
    expect(guard.check()).toMatchObject({
      cutOff: true,
      reason: "the swarm trains (1 peer alive) but this peer reaches none of its aux peers",
    });
  });

  it.each([
    ["the platform says nobody is alive", { alive: 0 }],
    ["the platform's count is unknown", { alive: undefined }],
    ["it reaches an aux peer", { aux: true }],
    ["the platform lists no aux peer", { listed: false }],
  ])("does not take an unreached aux for evidence when %s", (_name, change) => {
    const { guard, solo, evidence, checkFor } = setup();
    Object.assign(evidence, { listed: true, alive: 5, aux: false }, change);
    solo.steps = 1;
    expect(checkFor(3 * CUT_OFF_AFTER).every((verdict) => !verdict.cutOff)).toBe(true);
    expect(guard.check()).toEqual({ cutOff: false });
    expect(guard.held).toBe(false);
  });

  it("stays held while the evidence lasts, even after the solo steps were dropped", () => {
    const { guard, solo, evidence, checkFor } = setup();
    Object.assign(evidence, { listed: true, alive: 2 });
    solo.steps = 3;
    checkFor(CUT_OFF_AFTER);
    expect(guard.check().cutOff).toBe(true);
    // The caller drops the solo steps and holds training: nothing steps now.
    solo.steps = 0;
    expect(checkFor(5 * CUT_OFF_AFTER).every((verdict) => verdict.cutOff)).toBe(true);
    expect(guard.held).toBe(true);
  });

  it("lets go as soon as the evidence is gone: an aux peer reached", () => {
    const { guard, solo, evidence, checkFor } = setup();
    Object.assign(evidence, { listed: true, alive: 2 });
    solo.steps = 3;
    checkFor(CUT_OFF_AFTER);
    expect(guard.check().cutOff).toBe(true);
    solo.steps = 0;
    evidence.aux = true;
    expect(guard.check()).toEqual({ cutOff: false });
    expect(guard.held).toBe(false);
  });

  it("lets go as soon as the evidence is gone: a member again, or the refusals stopped", () => {
    const { guard, solo, evidence, advance, refuse, checkFor } = setup();
    solo.steps = 1;
    for (let elapsed = 0; elapsed <= CUT_OFF_AFTER; elapsed += 5_000) {
      refuse(ProtocolErrorCode.PASS_REVOKED, REFUSED_REASON);
      guard.check();
      advance(5_000);
    }
    refuse(ProtocolErrorCode.PASS_REVOKED, REFUSED_REASON);
    expect(guard.check().cutOff).toBe(true);
    solo.steps = 0;
    // A member took it.
    evidence.members = true;
    expect(guard.check()).toEqual({ cutOff: false });
    expect(guard.held).toBe(false);

    // Cut off again, then nobody refuses it any more (the token was replaced): it lets go after clearAfterMs.
    evidence.members = false;
    solo.steps = 1;
    for (let elapsed = 0; elapsed <= CUT_OFF_AFTER; elapsed += 5_000) {
      refuse(ProtocolErrorCode.PASS_REVOKED, REFUSED_REASON);
      guard.check();
      advance(5_000);
    }
    refuse(ProtocolErrorCode.PASS_REVOKED, REFUSED_REASON);
    expect(guard.check().cutOff).toBe(true);
    advance(CLEAR_AFTER);
    expect(guard.check().cutOff).toBe(true);
    advance(1);
    expect(guard.check()).toEqual({ cutOff: false });
    expect(checkFor(1_000, 1_000)).toEqual([{ cutOff: false }]);
  });

  it("starts the solo clock over after a release", () => {
    const { guard, solo, evidence, advance, checkFor } = setup();
    Object.assign(evidence, { listed: true, alive: 2 });
    solo.steps = 1;
    checkFor(CUT_OFF_AFTER);
    expect(guard.check().cutOff).toBe(true);
    evidence.aux = true;
    expect(guard.check()).toEqual({ cutOff: false });
    // Right away the aux is lost again and it steps alone: a whole cutOffAfterMs before another cut-off.
    evidence.aux = false;
    solo.steps = 1;
    expect(guard.check()).toEqual({ cutOff: false });
    advance(CUT_OFF_AFTER - 1);
    expect(guard.check()).toEqual({ cutOff: false });
    advance(1);
    expect(guard.check().cutOff).toBe(true);
  });

  it("starts the solo clock over when a shared step ends the solo run", () => {
    const { guard, solo, evidence, advance } = setup();
    Object.assign(evidence, { listed: true, alive: 2 });
    solo.steps = 4;
    guard.check();
    advance(CUT_OFF_AFTER - 1);
    // A step shared with another trainer: the solo run is over.
    solo.steps = 0;
    expect(guard.check()).toEqual({ cutOff: false });
    solo.steps = 1;
    advance(1);
    expect(guard.check()).toEqual({ cutOff: false });
    advance(CUT_OFF_AFTER - 1);
    expect(guard.check()).toEqual({ cutOff: false });
    advance(1);
    expect(guard.check().cutOff).toBe(true);
  });
});

describe("refusalAdvice", () => {
  const { banned, revokedToken } = revocationReasons();

  it("tells a banned user apart from a revoked token", () => {
    expect(refusalAdvice({ code: ProtocolErrorCode.PASS_REVOKED, reason: banned })).toBe(
      "banned: this node's user may not take part in the run",
    );
    expect(refusalAdvice({ code: ProtocolErrorCode.PASS_REVOKED, reason: revokedToken })).toBe(
      NEW_TOKEN_ADVICE,
    );
    expect(revokedToken).toBe(REVOKED_GRANT_REASON);
  });

  it("points at the clock for a pass from the future or a skewed request", () => {
    for (const code of [ProtocolErrorCode.PASS_NOT_YET_VALID, ProtocolErrorCode.REQUEST_CLOCK_SKEW]) {
      expect(refusalAdvice({ code, reason: "in the future" })).toBe(
        "check that this computer's clock is right",
      );
    }
  });

  it("says the experiment's key may have changed for a pass with a bad signature", () => {
    expect(refusalAdvice({ code: ProtocolErrorCode.PASS_BAD_SIGNATURE, reason: "bad signature" })).toBe(
      "the organizer may have changed the experiment's key: restart the node",
    );
  });

  it("says restart, then a new token, for anything else", () => {
    for (const code of [
      ProtocolErrorCode.PASS_EXPIRED,
      ProtocolErrorCode.PASS_WRONG_EXPERIMENT,
      "SOMETHING_NEW",
    ]) {
      expect(refusalAdvice({ code, reason: "banned or removed" })).toBe(
        "restart the node; if it is refused again, create a new token and restart it with that",
      );
    }
  });

  it("gives the advice with the reason in the refused note and at the cut-off", () => {
    const { guard, solo, refuse, advance } = setup();
    refuse(ProtocolErrorCode.PASS_REVOKED, banned);
    expect(guard.check()).toEqual({
      cutOff: false,
      refused:
        "refused by the swarm: this node's user is banned or no longer on the allowlist — banned: this node's user may not take part in the run",
    });
    solo.steps = 1;
    guard.check();
    advance(CUT_OFF_AFTER);
    refuse(ProtocolErrorCode.REQUEST_CLOCK_SKEW, "request time is 5 minutes off");
    expect(guard.check()).toMatchObject({
      cutOff: true,
      reason: "refused by the swarm: this computer's clock is off",
      advice: "check that this computer's clock is right",
    });
  });
});
