import { describe, expect, it } from "vitest";
import {
  AccessPassVerifier,
  decodeAccessPassUnverified,
  generateKeyPair,
  issueAccessPass,
  portableCrypto,
  ProtocolErrorCode,
} from "../src/index.ts";
import { nodeCrypto } from "../src/node.ts";
import { EXPERIMENT, HOUR, makeWorld, NOW, SKEW_MS, tamperPayload } from "./fixtures.ts";

describe.each([portableCrypto, nodeCrypto])("access pass ($name)", (crypto) => {
  it("round-trips every field", () => {
    const world = makeWorld(crypto);
    const token = world.pass(world.alice, { role: "aux" });
    const pass = world.passes.verify(token, { now: NOW });
    expect(pass).toEqual({
      experimentId: EXPERIMENT,
      username: "alice",
      role: "aux",
      peerPublicKey: world.alice.publicKey,
      grant: "token-alice",
      issuedAt: NOW - HOUR,
      expiresAt: NOW + HOUR,
      token,
    });
    expect(decodeAccessPassUnverified(token)).toEqual(pass);
  });

  it("refuses an expired pass, and accepts it one millisecond before expiry", () => {
    const world = makeWorld(crypto);
    const token = world.pass(world.alice, { expiresAt: NOW });
    expect(() => world.passes.verify(token, { now: NOW })).toThrow(
      expect.objectContaining({ code: ProtocolErrorCode.PASS_EXPIRED }),
    );
    expect(world.passes.verify(token, { now: NOW - 1 }).username).toBe("alice");
  });

  it("refuses an expired pass even after it was verified and cached while valid", () => {
    const world = makeWorld(crypto);
    const token = world.pass(world.alice);
    world.passes.verify(token, { now: NOW });
    expect(() => world.passes.verify(token, { now: NOW + HOUR })).toThrow(
      expect.objectContaining({ code: ProtocolErrorCode.PASS_EXPIRED }),
    );
  });

  it("refuses a pass signed by another authority", () => {
    const world = makeWorld(crypto);
    const token = world.pass(world.alice, {}, generateKeyPair());
    expect(() => world.passes.verify(token, { now: NOW })).toThrow(
      expect.objectContaining({ code: ProtocolErrorCode.PASS_BAD_SIGNATURE }),
    );
  });

  it.each([
    ["username", "mallory"],
    ["role", "aux"],
    ["expiresAt", NOW + 1000 * HOUR],
    ["experimentId", "exp-2"],
  ])("refuses a pass whose %s was tampered with", (field, value) => {
    const world = makeWorld(crypto);
    const token = tamperPayload(world.pass(world.alice), (payload) => {
      payload[field] = value;
    });
    expect(() => world.passes.verify(token, { now: NOW })).toThrow(
      expect.objectContaining({ code: ProtocolErrorCode.PASS_BAD_SIGNATURE }),
    );
  });

  it("refuses a pass whose peer key was swapped for the attacker's", () => {
    const world = makeWorld(crypto);
    const mallory = generateKeyPair();
    const token = tamperPayload(world.pass(world.alice), (payload) => {
      payload["peerPublicKey"] = Buffer.from(mallory.publicKey).toString("base64url");
    });
    expect(() => world.passes.verify(token, { now: NOW })).toThrow(
      expect.objectContaining({ code: ProtocolErrorCode.PASS_BAD_SIGNATURE }),
    );
  });

  it("refuses a pass of another experiment signed by the same authority", () => {
    const world = makeWorld(crypto);
    const other = new AccessPassVerifier({
      crypto,
      authorityPublicKey: world.authority.publicKey,
      experimentId: "exp-2",
    });
    expect(() => other.verify(world.pass(world.alice), { now: NOW })).toThrow(
      expect.objectContaining({ code: ProtocolErrorCode.PASS_WRONG_EXPERIMENT }),
    );
  });

  it("refuses a pass issued further in the future than the allowed skew", () => {
    const world = makeWorld(crypto);
    const token = world.pass(world.alice, { issuedAt: NOW + SKEW_MS + 1, expiresAt: NOW + HOUR });
    expect(() => world.passes.verify(token, { now: NOW })).toThrow(
      expect.objectContaining({ code: ProtocolErrorCode.PASS_NOT_YET_VALID }),
    );
    expect(world.passes.verify(token, { now: NOW + 1 }).username).toBe("alice");
  });

  it("refuses a role that the receiver does not accept", () => {
    const world = makeWorld(crypto);
    const token = world.pass(world.alice, { role: "trainer" });
    expect(() => world.passes.verify(token, { now: NOW, roles: ["aux"] })).toThrow(
      expect.objectContaining({ code: ProtocolErrorCode.PASS_WRONG_ROLE }),
    );
  });

  it("will not issue a pass for a small-order key, whose signatures verify for any message", () => {
    const world = makeWorld(crypto);
    const identityPoint = new Uint8Array(32);
    identityPoint[0] = 1;
    expect(() =>
      issueAccessPass(crypto, world.authority, {
        experimentId: EXPERIMENT,
        username: "mallory",
        role: "trainer",
        peerPublicKey: identityPoint,
        grant: "token-mallory",
        issuedAt: NOW,
        expiresAt: NOW + HOUR,
      }),
    ).toThrow(expect.objectContaining({ code: ProtocolErrorCode.INVALID_KEY }));
  });

  it("will not issue a pass that expires before it is issued", () => {
    const world = makeWorld(crypto);
    expect(() => world.pass(world.alice, { issuedAt: NOW, expiresAt: NOW })).toThrow(RangeError);
  });
});
