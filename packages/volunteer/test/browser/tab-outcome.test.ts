import { JoinError, JoinErrorCode } from "@barnraise/swarm";
import { describe, expect, it } from "vitest";
import { needsNewIdentity, tabFailure } from "../../src/browser/tab-outcome.ts";

const refused = (code: JoinErrorCode) => new JoinError(code, `CLI advice for ${code}: pass --identity`);

describe("how a tab's node ended, in the page's words", () => {
  it("joins as a new node only when the platform refused the tab's key, not the volunteer", () => {
    for (const code of [
      JoinErrorCode.TOKEN_REVOKED,
      JoinErrorCode.NODE_RETIRED,
      JoinErrorCode.KEY_CONFLICT,
    ]) {
      expect(needsNewIdentity(refused(code)), code).toBe(true);
    }
    for (const code of [
      JoinErrorCode.BANNED,
      JoinErrorCode.NOT_ALLOWLISTED,
      JoinErrorCode.TOO_MANY_NODES,
      JoinErrorCode.SIGNED_OUT,
      JoinErrorCode.AUTHORITY_CHANGED,
      JoinErrorCode.SERVER_UNREACHABLE,
    ]) {
      expect(needsNewIdentity(refused(code)), code).toBe(false);
    }
    expect(needsNewIdentity(new Error("TOKEN_REVOKED"))).toBe(false);
  });

  it("speaks of the browser's node and the session, never of tokens or identity files", () => {
    // The failures a tab shares with any program (no answer, a bad one) keep their own text, and a
    // verification failure quotes what did not verify.
    const own = ["SERVER_ERROR", "SERVER_UNREACHABLE", "BAD_RESPONSE", "ABORTED"];
    const quoted = ["PASS_INVALID", "CONFIG_TAMPERED", "AUTHORITY_CHANGED"];
    const said = Object.values(JoinErrorCode)
      .filter((code) => !own.includes(code) && !quoted.includes(code))
      .map((code) => tabFailure(refused(code)));
    for (const text of said) {
      expect(text).not.toMatch(/--identity|identity file|create a new token/);
    }
    expect(tabFailure(refused(JoinErrorCode.BANNED))).toMatch(/banned you/);
    expect(tabFailure(refused(JoinErrorCode.SIGNED_OUT))).toMatch(/sign in again/);
    expect(tabFailure(refused(JoinErrorCode.TOKEN_REVOKED))).toMatch(/was revoked/);
    expect(tabFailure(refused(JoinErrorCode.NODE_RETIRED))).toMatch(/retired under My nodes/);
    expect(tabFailure(refused(JoinErrorCode.PASS_INVALID))).toMatch(/did not verify/);
  });

  it("passes other failures on as they are", () => {
    expect(tabFailure(new Error("the shard's SHA-256 does not match"))).toBe(
      "the shard's SHA-256 does not match",
    );
    expect(tabFailure("plain")).toBe("plain");
  });
});
