import { describe, expect, it } from "vitest";
import {
  checkAttestedBytes,
  generateKeyPair,
  portableCrypto,
  ProtocolErrorCode,
  REVOKED_GRANT_REASON,
  RunStatus,
  signCheckpointAttestation,
  signExperimentConfig,
  parseExperimentConfig,
  signRunControl,
  verifyCheckpointAttestation,
  verifyRunControl,
  type RunControlInit,
} from "../src/index.ts";
import { nodeCrypto } from "../src/node.ts";
import { EXPERIMENT, makeWorld, NOW, tamperPayload } from "./fixtures.ts";

const SHA = "ab".repeat(32);

describe.each([portableCrypto, nodeCrypto])("run control ($name)", (crypto) => {
  const authority = generateKeyPair();
  const init: RunControlInit = {
    experimentId: EXPERIMENT,
    version: 7,
    issuedAt: NOW,
    status: RunStatus.paused,
    generation: 2,
    rollback: { checkpointId: "ckpt-1", step: 40, sha256: SHA, sizeBytes: 1234 },
    revokedUsernames: ["mallory", "eve", "mallory"],
    revokedGrants: ["token-b", "token-a", "token-b"],
  };
  const token = signRunControl(crypto, authority, init);
  const expected = { authorityPublicKey: authority.publicKey, experimentId: EXPERIMENT };

  it("round-trips status, generation, rollback and the revocation list (deduplicated, sorted)", () => {
    const control = verifyRunControl(crypto, token, expected);
    expect(control).toEqual({
      experimentId: EXPERIMENT,
      version: 7,
      issuedAt: NOW,
      status: "paused",
      generation: 2,
      rollback: init.rollback,
      revokedUsernames: ["eve", "mallory"],
      revokedGrants: ["token-a", "token-b"],
      token,
    });
  });

  it("refuses a control whose status was flipped", () => {
    const tampered = tamperPayload(token, (payload) => {
      payload["status"] = "running";
    });
    expect(() => verifyRunControl(crypto, tampered, expected)).toThrow(
      expect.objectContaining({ code: ProtocolErrorCode.CONTROL_BAD_SIGNATURE }),
    );
  });

  it("refuses a control whose revocation list was emptied", () => {
    const tampered = tamperPayload(token, (payload) => {
      payload["revoked"] = { usernames: [], grants: [] };
    });
    expect(() => verifyRunControl(crypto, tampered, expected)).toThrow(
      expect.objectContaining({ code: ProtocolErrorCode.CONTROL_BAD_SIGNATURE }),
    );
  });

  it("refuses a control signed by another key, or for another experiment", () => {
    const forged = signRunControl(crypto, generateKeyPair(), init);
    expect(() => verifyRunControl(crypto, forged, expected)).toThrow(
      expect.objectContaining({ code: ProtocolErrorCode.CONTROL_BAD_SIGNATURE }),
    );
    const other = signRunControl(crypto, authority, { ...init, experimentId: "other" });
    expect(() => verifyRunControl(crypto, other, expected)).toThrow(
      expect.objectContaining({ code: ProtocolErrorCode.CONTROL_WRONG_EXPERIMENT }),
    );
  });

  it("refuses a config token presented as a control (domain separation)", () => {
    const config = signExperimentConfig(crypto, authority, {
      experimentId: EXPERIMENT,
      version: 1,
      issuedAt: NOW,
      config: parseExperimentConfig({}),
    });
    expect(() => verifyRunControl(crypto, config, expected)).toThrow(
      expect.objectContaining({ code: ProtocolErrorCode.MALFORMED }),
    );
  });

  it("refuses malformed and oversized input with typed codes", () => {
    expect(() => verifyRunControl(crypto, 42, expected)).toThrow(
      expect.objectContaining({ code: ProtocolErrorCode.MALFORMED }),
    );
    expect(() => verifyRunControl(crypto, "x".repeat(600 * 1024), expected)).toThrow(
      expect.objectContaining({ code: ProtocolErrorCode.OVERSIZED }),
    );
  });

  it("cannot sign a rolled-back control without its checkpoint", () => {
    expect(() => signRunControl(crypto, authority, { ...init, rollback: null })).toThrow(RangeError);
  });
});

describe.each([portableCrypto, nodeCrypto])("checkpoint attestation ($name)", (crypto) => {
  const authority = generateKeyPair();
  const init = {
    experimentId: EXPERIMENT,
    checkpointId: "ckpt-9",
    step: 90,
    sha256: SHA,
    sizeBytes: 4096,
    generation: 1,
    timeline: 3,
    configVersion: 2,
    createdAt: NOW,
  };
  const token = signCheckpointAttestation(crypto, authority, init);
  const expected = { authorityPublicKey: authority.publicKey, experimentId: EXPERIMENT };

  it("round-trips and vouches for exactly the attested bytes", () => {
    const attestation = verifyCheckpointAttestation(crypto, token, expected);
    expect(attestation).toEqual({ ...init, token });
    expect(() => {
      checkAttestedBytes(attestation, { sha256Hex: SHA, sizeBytes: 4096 });
    }).not.toThrow();
    expect(() => {
      checkAttestedBytes(attestation, { sha256Hex: "cd".repeat(32), sizeBytes: 4096 });
    }).toThrow(expect.objectContaining({ code: ProtocolErrorCode.CHECKPOINT_MISMATCH }));
    expect(() => {
      checkAttestedBytes(attestation, { sha256Hex: SHA, sizeBytes: 4095 });
    }).toThrow(expect.objectContaining({ code: ProtocolErrorCode.CHECKPOINT_MISMATCH }));
  });

  it("refuses a tampered step, a forged signature and another experiment", () => {
    const tampered = tamperPayload(token, (payload) => {
      payload["step"] = 900;
    });
    expect(() => verifyCheckpointAttestation(crypto, tampered, expected)).toThrow(
      expect.objectContaining({ code: ProtocolErrorCode.CHECKPOINT_BAD_SIGNATURE }),
    );
    const forged = signCheckpointAttestation(crypto, generateKeyPair(), init);
    expect(() => verifyCheckpointAttestation(crypto, forged, expected)).toThrow(
      expect.objectContaining({ code: ProtocolErrorCode.CHECKPOINT_BAD_SIGNATURE }),
    );
    const other = signCheckpointAttestation(crypto, authority, { ...init, experimentId: "other" });
    expect(() => verifyCheckpointAttestation(crypto, other, expected)).toThrow(
      expect.objectContaining({ code: ProtocolErrorCode.CHECKPOINT_WRONG_EXPERIMENT }),
    );
  });
});

describe.each([portableCrypto, nodeCrypto])("pass revocation ($name)", (crypto) => {
  it("refuses the passes of revoked usernames and grants, and only those", () => {
    const world = makeWorld(crypto);
    const alicePass = world.pass(world.alice);
    const bobPass = world.pass(world.bob);
    expect(world.passes.verify(alicePass, { now: NOW }).username).toBe("alice");

    world.passes.setRevoked({ usernames: ["alice"], grants: [] });
    expect(() => world.passes.verify(alicePass, { now: NOW })).toThrow(
      expect.objectContaining({ code: ProtocolErrorCode.PASS_REVOKED }),
    );
    expect(world.passes.verify(bobPass, { now: NOW }).username).toBe("bob");

    world.passes.setRevoked({ usernames: [], grants: ["token-bob"] });
    expect(world.passes.verify(alicePass, { now: NOW }).username).toBe("alice");
    expect(() => world.passes.verify(bobPass, { now: NOW })).toThrow(
      expect.objectContaining({ code: ProtocolErrorCode.PASS_REVOKED, message: REVOKED_GRANT_REASON }),
    );
  });

  it("revokes a grant, never a key: the same node with a pass of a new token is accepted", () => {
    const world = makeWorld(crypto);
    const oldPass = world.pass(world.bob, { grant: "token-old" });
    const newPass = world.pass(world.bob, { grant: "token-new", issuedAt: NOW - 1000 });
    world.passes.setRevoked({ usernames: [], grants: ["token-old"] });
    expect(() => world.passes.verify(oldPass, { now: NOW })).toThrow(
      expect.objectContaining({ code: ProtocolErrorCode.PASS_REVOKED }),
    );
    const accepted = world.passes.verify(newPass, { now: NOW });
    expect(accepted.grant).toBe("token-new");
    expect(accepted.peerPublicKey).toEqual(world.bob.publicKey);
  });
});
