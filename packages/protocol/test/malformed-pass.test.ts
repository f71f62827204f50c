// Fuzz tests for the access pass readers: AccessPassVerifier.verify and decodeAccessPassUnverified.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  canonicalJson,
  decodeAccessPassUnverified,
  MAX_PASS_TOKEN_LENGTH,
  portableCrypto,
  SignatureDomain,
  toBase64Url,
} from "../src/node.ts";
import {
  C,
  SEED,
  RUNS,
  expectProtocolError,
  expectNothingButProtocolError,
  utf8,
  ALPHANUMERIC,
  splitToken,
  joinToken,
  payloadObject,
  sealBytes,
  NOW,
  authority,
  alice,
  stranger,
  issuePass,
  alicePass,
  newPassVerifier,
} from "./fuzz-support.ts";
import { type TokenEntryPoint, tokenReaderSuite } from "./fuzz-token-suite.ts";

describe("AccessPassVerifier.verify", () => {
  const verifier = newPassVerifier();
  const valid = issuePass(alice, "alice-fuzz");
  const passEntry: TokenEntryPoint = {
    async: false,
    read: (token) => verifier.verify(token, { now: NOW }),
    maxLength: MAX_PASS_TOKEN_LENGTH,
    domain: SignatureDomain.pass,
    signer: authority,
    signWith: portableCrypto,
    valid,
    fresh: () => issuePass(alice),
    corruptedCodes: [C.MALFORMED, C.NON_CANONICAL, C.PASS_BAD_SIGNATURE],
    badSignature: C.PASS_BAD_SIGNATURE,
    signatureOnlyFields: ["experimentId", "username", "peerPublicKey"],
  };
  tokenReaderSuite(passEntry);

  const validPayload = payloadObject(valid);
  const sealPass = (payload: unknown) => sealBytes(SignatureDomain.pass, canonicalJson(payload), authority);

  it.each([
    ["issuedAt", -1],
    ["issuedAt", -NOW],
    ["expiresAt", -1],
    ["issuedAt", 1.5],
    ["expiresAt", NOW + 0.5],
    ["issuedAt", 1e300],
    ["expiresAt", 1e21],
    ["expiresAt", 2 ** 53],
    ["expiresAt", Number.MAX_SAFE_INTEGER + 2],
    ["expiresAt", Number.MIN_SAFE_INTEGER],
    ["expiresAt", NOW - 60_000], // equal to issuedAt
    ["expiresAt", NOW - 120_000], // before issuedAt
    ["experimentId", ""],
    ["experimentId", "exp 1"],
    ["experimentId", "x".repeat(65)],
    ["username", "al/ice"],
    ["username", ""],
    ["role", "admin"],
    ["role", "Trainer"],
    ["peerPublicKey", ""],
    ["peerPublicKey", toBase64Url(new Uint8Array(31))],
    ["peerPublicKey", toBase64Url(new Uint8Array(33))],
    ["peerPublicKey", `${toBase64Url(alice.publicKey)}=`],
    ["peerPublicKey", Buffer.from(new Uint8Array(32).fill(0xfb)).toString("base64").slice(0, 43)], // '+' and '/'
    ["peerPublicKey", `${toBase64Url(alice.publicKey).slice(0, 42)}B`], // non-zero padding bits
    ["v", 0],
  ])("a signed pass with %s = %j is MALFORMED", (field, value) => {
    const token = sealPass({ ...validPayload, [field]: value });
    expectProtocolError(() => verifier.verify(token, { now: NOW }), [C.MALFORMED]);
    expectProtocolError(() => decodeAccessPassUnverified(token), [C.MALFORMED]);
  });

  it("a changed payload byte that leaves a well-formed pass is PASS_BAD_SIGNATURE", () => {
    // decodeAccessPassUnverified is the oracle: when it accepts the corrupted token, the only
    // thing wrong with it is the signature.
    const parts = splitToken(valid);
    let wellFormed = 0;
    fc.assert(
      fc.property(
        fc.nat({ max: parts.payload.length - 1 }),
        fc.oneof(fc.integer({ min: 0, max: 255 }), fc.constantFrom(...utf8(ALPHANUMERIC))),
        (index, byte) => {
          fc.pre(parts.payload[index] !== byte);
          const payload = parts.payload.slice();
          payload[index] = byte;
          const token = joinToken({ ...parts, payload });
          const decoded = expectNothingButProtocolError(
            () => decodeAccessPassUnverified(token),
            [C.MALFORMED, C.NON_CANONICAL],
          );
          const error = expectProtocolError(
            () => verifier.verify(token, { now: NOW }),
            passEntry.corruptedCodes,
          );
          if (decoded !== undefined) {
            wellFormed++;
            expect(error.code).toBe(C.PASS_BAD_SIGNATURE);
          }
        },
      ),
      RUNS,
    );
    expect(wellFormed).toBeGreaterThanOrEqual(RUNS.numRuns / 20);
  });

  it("a pass signed by another key, or for another domain, is PASS_BAD_SIGNATURE", () => {
    const bytes = canonicalJson(validPayload);
    for (const token of [
      sealBytes(SignatureDomain.pass, bytes, stranger),
      sealBytes(SignatureDomain.config, bytes, authority),
      sealBytes(SignatureDomain.request, bytes, authority),
    ]) {
      expectProtocolError(() => verifier.verify(token, { now: NOW }), [C.PASS_BAD_SIGNATURE]);
    }
  });

  it("with tweetnacl as the provider, corrupted signatures are PASS_BAD_SIGNATURE too", () => {
    const portableVerifier = newPassVerifier(portableCrypto);
    const parts = splitToken(valid);
    fc.assert(
      fc.property(fc.nat({ max: 511 }), (bit) => {
        const signature = parts.signature.slice();
        signature[bit >> 3] = (signature[bit >> 3] ?? 0) ^ (1 << (bit & 7));
        expectProtocolError(
          () => portableVerifier.verify(joinToken({ ...parts, signature }), { now: NOW }),
          [C.PASS_BAD_SIGNATURE],
        );
      }),
      { seed: SEED, numRuns: 50 },
    );
    expect(portableVerifier.verify(valid, { now: NOW }).username).toBe("alice-fuzz");
  });
});

describe("decodeAccessPassUnverified", () => {
  tokenReaderSuite({
    async: false,
    read: (token) => decodeAccessPassUnverified(token as string),
    maxLength: MAX_PASS_TOKEN_LENGTH,
    domain: SignatureDomain.pass,
    signer: authority,
    signWith: portableCrypto,
    valid: alicePass,
    fresh: () => issuePass(alice),
    corruptedCodes: [C.MALFORMED, C.NON_CANONICAL],
    badSignature: undefined,
    signatureOnlyFields: ["username", "peerPublicKey"],
  });
});
