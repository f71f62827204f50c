import { describe, expect, it } from "vitest";
import {
  checkBodyDigest,
  generateKeyPair,
  MemoryNonceStore,
  ReplayGuard,
  RequestVerifier,
  portableCrypto,
  ProtocolErrorCode,
  signRequest,
  type CryptoProvider,
  type KeyPair,
} from "../src/index.ts";
import { nodeCrypto } from "../src/node.ts";
import { bytes, makeWorld, NOW, SCOPE, SKEW_MS, tamperPayload } from "./fixtures.ts";

const BODY = bytes('{"loss":2.5,"step":7}');

function request(
  crypto: CryptoProvider,
  signer: KeyPair,
  pass: string,
  recipient: KeyPair,
  overrides: Partial<{ time: number; body: Uint8Array; scope: string; nonce: Uint8Array }> = {},
): string {
  return signRequest(crypto, signer, {
    pass,
    recipientPublicKey: recipient.publicKey,
    scope: overrides.scope ?? SCOPE,
    body: overrides.body ?? BODY,
    time: overrides.time ?? NOW,
    ...(overrides.nonce ? { nonce: overrides.nonce } : {}),
  });
}

describe.each([portableCrypto, nodeCrypto])("signed request ($name)", (crypto) => {
  it("accepts a well-formed request and returns who sent it", async () => {
    const world = makeWorld(crypto);
    const token = request(crypto, world.alice, world.pass(world.alice), world.bob);
    const verified = await world.bobVerifier.verify(token, { scope: SCOPE, body: BODY, now: NOW });
    expect(verified.pass.username).toBe("alice");
    expect(verified.pass.peerPublicKey).toEqual(world.alice.publicKey);
    expect(verified.scope).toBe(SCOPE);
    expect(verified.time).toBe(NOW);
    expect(verified.bodySha256).toEqual(crypto.sha256(BODY));
  });

  it("refuses a replay inside the window", async () => {
    const world = makeWorld(crypto);
    const token = request(crypto, world.alice, world.pass(world.alice), world.bob);
    await world.bobVerifier.verify(token, { scope: SCOPE, body: BODY, now: NOW });
    await expect(
      world.bobVerifier.verify(token, { scope: SCOPE, body: BODY, now: NOW + SKEW_MS }),
    ).rejects.toMatchObject({ code: ProtocolErrorCode.REQUEST_REPLAYED });
  });

  it("refuses a replay after the window, when the nonce is forgotten, by its time", async () => {
    const world = makeWorld(crypto);
    const token = request(crypto, world.alice, world.pass(world.alice), world.bob);
    await world.bobVerifier.verify(token, { scope: SCOPE, body: BODY, now: NOW });
    // By now the store has swept the nonce: only the time check stands between the copy and acceptance.
    const later = NOW + 2 * SKEW_MS + 1;
    await expect(
      world.bobVerifier.verify(token, { scope: SCOPE, body: BODY, now: later }),
    ).rejects.toMatchObject({ code: ProtocolErrorCode.REQUEST_CLOCK_SKEW });
  });

  it("forgets a nonce after 2N, so a new request may reuse it and memory stays bounded", async () => {
    const world = makeWorld(crypto);
    const nonce = new Uint8Array(16).fill(7);
    const pass = world.pass(world.alice);
    await world.bobVerifier.verify(request(crypto, world.alice, pass, world.bob, { nonce }), {
      scope: SCOPE,
      body: BODY,
      now: NOW,
    });
    const later = NOW + 2 * SKEW_MS;
    const again = request(crypto, world.alice, pass, world.bob, { nonce, time: later });
    await expect(
      world.bobVerifier.verify(again, { scope: SCOPE, body: BODY, now: later }),
    ).resolves.toBeDefined();
    expect(world.store.size).toBe(1);
  });

  it("keeps nonces of different signers apart", async () => {
    const world = makeWorld(crypto);
    const nonce = new Uint8Array(16).fill(9);
    const carol = generateKeyPair();
    await world.bobVerifier.verify(
      request(crypto, world.alice, world.pass(world.alice), world.bob, { nonce }),
      {
        scope: SCOPE,
        body: BODY,
        now: NOW,
      },
    );
    const carolPass = world.pass(carol, { username: "carol" });
    await expect(
      world.bobVerifier.verify(request(crypto, carol, carolPass, world.bob, { nonce }), {
        scope: SCOPE,
        body: BODY,
        now: NOW,
      }),
    ).resolves.toBeDefined();
  });

  it("refuses a request carrying an expired pass", async () => {
    const world = makeWorld(crypto);
    const token = request(crypto, world.alice, world.pass(world.alice, { expiresAt: NOW - 1 }), world.bob);
    await expect(
      world.bobVerifier.verify(token, { scope: SCOPE, body: BODY, now: NOW }),
    ).rejects.toMatchObject({
      code: ProtocolErrorCode.PASS_EXPIRED,
    });
  });

  it("refuses a request carrying a pass signed by another authority", async () => {
    const world = makeWorld(crypto);
    const forged = world.pass(world.alice, {}, generateKeyPair());
    const token = request(crypto, world.alice, forged, world.bob);
    await expect(
      world.bobVerifier.verify(token, { scope: SCOPE, body: BODY, now: NOW }),
    ).rejects.toMatchObject({
      code: ProtocolErrorCode.PASS_BAD_SIGNATURE,
    });
  });

  it("refuses a tampered body", async () => {
    const world = makeWorld(crypto);
    const token = request(crypto, world.alice, world.pass(world.alice), world.bob);
    await expect(
      world.bobVerifier.verify(token, { scope: SCOPE, body: bytes('{"loss":0.1,"step":7}'), now: NOW }),
    ).rejects.toMatchObject({ code: ProtocolErrorCode.BODY_MISMATCH });
  });

  it("refuses a tampered body digest given for a streamed body", async () => {
    const world = makeWorld(crypto);
    const token = request(crypto, world.alice, world.pass(world.alice), world.bob);
    await expect(
      world.bobVerifier.verify(token, { scope: SCOPE, body: { sha256: new Uint8Array(32) }, now: NOW }),
    ).rejects.toMatchObject({ code: ProtocolErrorCode.BODY_MISMATCH });
  });

  it("refuses a request whose pass has a tampered field, though the request itself is signed", async () => {
    const world = makeWorld(crypto);
    const pass = tamperPayload(world.pass(world.alice), (payload) => {
      payload["role"] = "aux";
    });
    const token = request(crypto, world.alice, pass, world.bob);
    await expect(
      world.bobVerifier.verify(token, { scope: SCOPE, body: BODY, now: NOW }),
    ).rejects.toMatchObject({
      code: ProtocolErrorCode.PASS_BAD_SIGNATURE,
    });
  });

  it.each([
    ["time", NOW + 1],
    ["scope", "POST /api/v1/experiments/exp-1/checkpoints"],
    ["nonce", Buffer.alloc(16, 1).toString("base64url")],
    ["bodySha256", Buffer.alloc(32, 1).toString("base64url")],
  ])("refuses a request whose %s was tampered with", async (field, value) => {
    const world = makeWorld(crypto);
    const token = tamperPayload(
      request(crypto, world.alice, world.pass(world.alice), world.bob),
      (payload) => {
        payload[field] = value;
      },
    );
    const scope = field === "scope" ? String(value) : SCOPE;
    const body = field === "bodySha256" ? { sha256: Buffer.alloc(32, 1) } : BODY;
    await expect(world.bobVerifier.verify(token, { scope, body, now: NOW })).rejects.toMatchObject({
      code: ProtocolErrorCode.REQUEST_BAD_SIGNATURE,
    });
  });

  it("refuses a request signed by someone who holds another peer's pass", async () => {
    const world = makeWorld(crypto);
    const mallory = generateKeyPair();
    const token = request(crypto, mallory, world.pass(world.alice), world.bob);
    await expect(
      world.bobVerifier.verify(token, { scope: SCOPE, body: BODY, now: NOW }),
    ).rejects.toMatchObject({
      code: ProtocolErrorCode.REQUEST_BAD_SIGNATURE,
    });
  });

  it("refuses a request addressed to another recipient", async () => {
    const world = makeWorld(crypto);
    const token = request(crypto, world.alice, world.pass(world.alice), world.alice);
    await expect(
      world.bobVerifier.verify(token, { scope: SCOPE, body: BODY, now: NOW }),
    ).rejects.toMatchObject({
      code: ProtocolErrorCode.REQUEST_WRONG_RECIPIENT,
    });
  });

  it("refuses a request signed for another scope", async () => {
    const world = makeWorld(crypto);
    const token = request(crypto, world.alice, world.pass(world.alice), world.bob, { scope: "GET /other" });
    await expect(
      world.bobVerifier.verify(token, { scope: SCOPE, body: BODY, now: NOW }),
    ).rejects.toMatchObject({
      code: ProtocolErrorCode.REQUEST_WRONG_SCOPE,
    });
  });

  it("refuses a pass that belongs to another key than the connection's peer", async () => {
    const world = makeWorld(crypto);
    const token = request(crypto, world.alice, world.pass(world.alice), world.bob);
    await expect(
      world.bobVerifier.verify(token, {
        scope: SCOPE,
        body: BODY,
        now: NOW,
        sender: generateKeyPair().publicKey,
      }),
    ).rejects.toMatchObject({ code: ProtocolErrorCode.REQUEST_WRONG_SENDER });
    await expect(
      world.bobVerifier.verify(token, { scope: SCOPE, body: BODY, now: NOW, sender: world.alice.publicKey }),
    ).resolves.toBeDefined();
  });

  it.each([
    ["ahead", SKEW_MS + 1],
    ["behind", -(SKEW_MS + 1)],
  ])("refuses a request whose clock is %s by more than N", async (_, offset) => {
    const world = makeWorld(crypto);
    const token = request(crypto, world.alice, world.pass(world.alice), world.bob, { time: NOW + offset });
    await expect(
      world.bobVerifier.verify(token, { scope: SCOPE, body: BODY, now: NOW }),
    ).rejects.toMatchObject({
      code: ProtocolErrorCode.REQUEST_CLOCK_SKEW,
    });
  });

  it.each([
    ["ahead", SKEW_MS],
    ["behind", -SKEW_MS],
  ])("accepts a request whose clock is %s by exactly N", async (_, offset) => {
    const world = makeWorld(crypto);
    const token = request(crypto, world.alice, world.pass(world.alice), world.bob, { time: NOW + offset });
    await expect(
      world.bobVerifier.verify(token, { scope: SCOPE, body: BODY, now: NOW }),
    ).resolves.toBeDefined();
  });

  it("records no nonce for a request that fails authentication", async () => {
    const world = makeWorld(crypto);
    const token = request(crypto, generateKeyPair(), world.pass(world.alice), world.bob);
    await expect(world.bobVerifier.verify(token, { scope: SCOPE, body: BODY, now: NOW })).rejects.toThrow();
    expect(world.store.size).toBe(0);
  });

  it("defers the body check when asked, and the digest check still refuses a mismatch", async () => {
    const world = makeWorld(crypto);
    const token = request(crypto, world.alice, world.pass(world.alice), world.bob);
    const verified = await world.bobVerifier.verify(token, { scope: SCOPE, body: "verify-later", now: NOW });
    expect(() => {
      checkBodyDigest(verified.bodySha256, crypto.sha256(BODY));
    }).not.toThrow();
    expect(() => {
      checkBodyDigest(verified.bodySha256, crypto.sha256(bytes("other")));
    }).toThrow(expect.objectContaining({ code: ProtocolErrorCode.BODY_MISMATCH }));
  });

  it("refuses requests once the replay store is full, rather than forget nonces early", async () => {
    const world = makeWorld(crypto);
    const verifier = new RequestVerifier({
      crypto,
      passes: world.passes,
      recipientPublicKey: world.bob.publicKey,
      replayGuard: new ReplayGuard({ store: new MemoryNonceStore({ maxEntries: 1 }), maxSkewMs: SKEW_MS }),
    });
    const pass = world.pass(world.alice);
    await verifier.verify(request(crypto, world.alice, pass, world.bob), {
      scope: SCOPE,
      body: BODY,
      now: NOW,
    });
    await expect(
      verifier.verify(request(crypto, world.alice, pass, world.bob), { scope: SCOPE, body: BODY, now: NOW }),
    ).rejects.toMatchObject({ code: ProtocolErrorCode.REPLAY_STORE_FULL });
  });
});
