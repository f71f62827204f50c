import { describe, expect, it } from "vitest";
import {
  generateKeyPair,
  portableCrypto,
  ProtocolErrorCode,
  signResponse,
  verifyResponse,
  type CryptoProvider,
  type ResponseCheck,
} from "../src/index.ts";
import { nodeCrypto } from "../src/node.ts";
import { bytes, makeWorld, NOW } from "./fixtures.ts";

const BODY = bytes("averaged part 3");
const NONCE = new Uint8Array(16).fill(42);

type World = ReturnType<typeof makeWorld>;

/** Alice asked Bob: verify `token` as his answer, with any check field overridden. */
function verifyAsked(world: World, token: string, overrides: Partial<ResponseCheck> = {}) {
  return verifyResponse(world.crypto, world.passes, token, {
    responderPublicKey: world.bob.publicKey,
    requestNonce: NONCE,
    body: BODY,
    now: NOW,
    ...overrides,
  });
}

describe.each([portableCrypto, nodeCrypto])("signed response ($name)", (crypto: CryptoProvider) => {
  it("accepts the answer of the peer that was asked, echoing the nonce", () => {
    const world = makeWorld(crypto);
    const token = signResponse(crypto, world.bob, {
      pass: world.pass(world.bob),
      requestNonce: NONCE,
      body: BODY,
    });
    const pass = verifyAsked(world, token);
    expect(pass.username).toBe("bob");
  });

  it("refuses a response with the wrong nonce", () => {
    const world = makeWorld(crypto);
    const token = signResponse(crypto, world.bob, {
      pass: world.pass(world.bob),
      requestNonce: new Uint8Array(16).fill(1),
      body: BODY,
    });
    expect(() => verifyAsked(world, token)).toThrow(
      expect.objectContaining({ code: ProtocolErrorCode.RESPONSE_NONCE_MISMATCH }),
    );
  });

  it("refuses a response signed by a different key than its pass", () => {
    const world = makeWorld(crypto);
    const token = signResponse(crypto, generateKeyPair(), {
      pass: world.pass(world.bob),
      requestNonce: NONCE,
      body: BODY,
    });
    expect(() => verifyAsked(world, token)).toThrow(
      expect.objectContaining({ code: ProtocolErrorCode.RESPONSE_BAD_SIGNATURE }),
    );
  });

  it("refuses a valid response from a peer other than the one asked", () => {
    const world = makeWorld(crypto);
    const token = signResponse(crypto, world.alice, {
      pass: world.pass(world.alice),
      requestNonce: NONCE,
      body: BODY,
    });
    expect(() => verifyAsked(world, token)).toThrow(
      expect.objectContaining({ code: ProtocolErrorCode.RESPONSE_WRONG_RESPONDER }),
    );
  });

  it("refuses a response whose body was tampered with", () => {
    const world = makeWorld(crypto);
    const token = signResponse(crypto, world.bob, {
      pass: world.pass(world.bob),
      requestNonce: NONCE,
      body: BODY,
    });
    expect(() => verifyAsked(world, token, { body: bytes("averaged part 4") })).toThrow(
      expect.objectContaining({ code: ProtocolErrorCode.BODY_MISMATCH }),
    );
  });

  it("refuses a response whose responder pass has expired or was forged", () => {
    const world = makeWorld(crypto);
    const expired = signResponse(crypto, world.bob, {
      pass: world.pass(world.bob, { expiresAt: NOW }),
      requestNonce: NONCE,
      body: BODY,
    });
    expect(() => verifyAsked(world, expired)).toThrow(
      expect.objectContaining({ code: ProtocolErrorCode.PASS_EXPIRED }),
    );
    const forged = signResponse(crypto, world.bob, {
      pass: world.pass(world.bob, {}, generateKeyPair()),
      requestNonce: NONCE,
      body: BODY,
    });
    expect(() => verifyAsked(world, forged)).toThrow(
      expect.objectContaining({ code: ProtocolErrorCode.PASS_BAD_SIGNATURE }),
    );
  });
});
