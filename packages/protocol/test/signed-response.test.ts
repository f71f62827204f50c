import { describe, expect, it } from "vitest";
import {
  generateKeyPair,
  portableCrypto,
  ProtocolErrorCode,
  signResponse,
  verifyResponse,
  type CryptoProvider,
} from "../src/index.ts";
import { nodeCrypto } from "../src/node.ts";
import { bytes, makeWorld, NOW } from "./fixtures.ts";

const BODY = bytes("averaged part 3");
const NONCE = new Uint8Array(16).fill(42);

describe.each([portableCrypto, nodeCrypto])("signed response ($name)", (crypto: CryptoProvider) => {
  it("accepts the answer of the peer that was asked, echoing the nonce", () => {
    const world = makeWorld(crypto);
    const token = signResponse(crypto, world.bob, {
      pass: world.pass(world.bob),
      requestNonce: NONCE,
      body: BODY,
    });
    const pass = verifyResponse(crypto, world.passes, token, {
      responderPublicKey: world.bob.publicKey,
      requestNonce: NONCE,
      body: BODY,
      now: NOW,
    });
    expect(pass.username).toBe("bob");
  });

  it("refuses a response with the wrong nonce", () => {
    const world = makeWorld(crypto);
    const token = signResponse(crypto, world.bob, {
      pass: world.pass(world.bob),
      requestNonce: new Uint8Array(16).fill(1),
      body: BODY,
    });
    expect(() =>
      verifyResponse(crypto, world.passes, token, {
        responderPublicKey: world.bob.publicKey,
        requestNonce: NONCE,
        body: BODY,
        now: NOW,
      }),
    ).toThrow(expect.objectContaining({ code: ProtocolErrorCode.RESPONSE_NONCE_MISMATCH }));
  });

  it("refuses a response signed by a different key than its pass", () => {
    const world = makeWorld(crypto);
    const token = signResponse(crypto, generateKeyPair(), {
      pass: world.pass(world.bob),
      requestNonce: NONCE,
      body: BODY,
    });
    expect(() =>
      verifyResponse(crypto, world.passes, token, {
        responderPublicKey: world.bob.publicKey,
        requestNonce: NONCE,
        body: BODY,
        now: NOW,
      }),
    ).toThrow(expect.objectContaining({ code: ProtocolErrorCode.RESPONSE_BAD_SIGNATURE }));
  });

  it("refuses a valid response from a peer other than the one asked", () => {
    const world = makeWorld(crypto);
    const token = signResponse(crypto, world.alice, {
      pass: world.pass(world.alice),
      requestNonce: NONCE,
      body: BODY,
    });
    expect(() =>
      verifyResponse(crypto, world.passes, token, {
        responderPublicKey: world.bob.publicKey,
        requestNonce: NONCE,
        body: BODY,
        now: NOW,
      }),
    ).toThrow(expect.objectContaining({ code: ProtocolErrorCode.RESPONSE_WRONG_RESPONDER }));
  });

  it("refuses a response whose body was tampered with", () => {
    const world = makeWorld(crypto);
    const token = signResponse(crypto, world.bob, {
      pass: world.pass(world.bob),
      requestNonce: NONCE,
      body: BODY,
    });
    expect(() =>
      verifyResponse(crypto, world.passes, token, {
        responderPublicKey: world.bob.publicKey,
        requestNonce: NONCE,
        body: bytes("averaged part 4"),
        now: NOW,
      }),
    ).toThrow(expect.objectContaining({ code: ProtocolErrorCode.BODY_MISMATCH }));
  });

  it("refuses a response whose responder pass has expired or was forged", () => {
    const world = makeWorld(crypto);
    const check = { responderPublicKey: world.bob.publicKey, requestNonce: NONCE, body: BODY, now: NOW };
    const expired = signResponse(crypto, world.bob, {
      pass: world.pass(world.bob, { expiresAt: NOW }),
      requestNonce: NONCE,
      body: BODY,
    });
    expect(() => verifyResponse(crypto, world.passes, expired, check)).toThrow(
      expect.objectContaining({ code: ProtocolErrorCode.PASS_EXPIRED }),
    );
    const forged = signResponse(crypto, world.bob, {
      pass: world.pass(world.bob, {}, generateKeyPair()),
      requestNonce: NONCE,
      body: BODY,
    });
    expect(() => verifyResponse(crypto, world.passes, forged, check)).toThrow(
      expect.objectContaining({ code: ProtocolErrorCode.PASS_BAD_SIGNATURE }),
    );
  });
});
