import { describe, expect, it } from "vitest";
import {
  canonicalJson,
  DEFAULT_ROTATION_GRACE_MS,
  followAuthorityRotations,
  generateKeyPair,
  MAX_ROTATION_CERTIFICATES,
  MAX_ROTATION_TOKEN_LENGTH,
  portableCrypto,
  ProtocolErrorCode,
  SignatureDomain,
  signAuthorityRotation,
  toBase64Url,
  verifyAuthorityRotation,
  type CryptoProvider,
  type KeyPair,
} from "../src/index.ts";
import { nodeCrypto } from "../src/node.ts";
import { expectProtocolError } from "./expect-protocol-error.ts";
import { EXPERIMENT, NOW, tamperPayload } from "./fixtures.ts";
import { sealBytes } from "./fuzz-support.ts";
import { tokenReaderSuite } from "./fuzz-token-suite.ts";

const C = ProtocolErrorCode;
const MINUTE = 60_000;

/** A certificate replacing `from` by `to` at version `keyVersion`, signed by `from`. */
function rotate(
  crypto: CryptoProvider,
  from: KeyPair,
  to: KeyPair,
  keyVersion: number,
  overrides: Partial<{ experimentId: string; rotatedAt: number }> = {},
): string {
  return signAuthorityRotation(crypto, from, {
    experimentId: EXPERIMENT,
    keyVersion,
    publicKey: to.publicKey,
    rotatedAt: NOW + keyVersion * MINUTE,
    ...overrides,
  });
}

describe.each([portableCrypto, nodeCrypto])("authority rotation certificate ($name)", (crypto) => {
  const a = generateKeyPair();
  const b = generateKeyPair();
  const c = generateKeyPair();
  const aToB = rotate(crypto, a, b, 2);
  const bToC = rotate(crypto, b, c, 3);

  it("round-trips every field, and names the key that signed it as the previous key", () => {
    expect(verifyAuthorityRotation(crypto, aToB, { experimentId: EXPERIMENT })).toEqual({
      experimentId: EXPERIMENT,
      keyVersion: 2,
      publicKey: b.publicKey,
      previousPublicKey: a.publicKey,
      rotatedAt: NOW + 2 * MINUTE,
      token: aToB,
    });
  });

  it("refuses a certificate whose new key was swapped (ROTATION_BAD_SIGNATURE)", () => {
    const tampered = tamperPayload(aToB, (payload) => {
      payload["publicKey"] = toBase64Url(generateKeyPair().publicKey);
    });
    expectProtocolError(
      () => verifyAuthorityRotation(crypto, tampered, { experimentId: EXPERIMENT }),
      [C.ROTATION_BAD_SIGNATURE],
    );
  });

  it("refuses a certificate forged in the name of a key its signer does not hold", () => {
    // Mallory signs "a is replaced by mallory's key" with her own key, and names a as the signer.
    const mallory = generateKeyPair();
    const forged = tamperPayload(rotate(crypto, mallory, generateKeyPair(), 2), (payload) => {
      payload["previousPublicKey"] = toBase64Url(a.publicKey);
    });
    expectProtocolError(
      () => verifyAuthorityRotation(crypto, forged, { experimentId: EXPERIMENT }),
      [C.ROTATION_BAD_SIGNATURE],
    );
    expectProtocolError(
      () =>
        followAuthorityRotations(crypto, {
          from: a.publicKey,
          experimentId: EXPERIMENT,
          certificates: [forged],
        }),
      [C.ROTATION_BAD_SIGNATURE],
    );
  });

  it("refuses a certificate whose rotation time or version was moved", () => {
    for (const [field, value] of [
      ["rotatedAt", NOW + 99 * MINUTE],
      ["keyVersion", 9],
    ] as const) {
      const tampered = tamperPayload(aToB, (payload) => {
        payload[field] = value;
      });
      expectProtocolError(
        () => verifyAuthorityRotation(crypto, tampered, { experimentId: EXPERIMENT }),
        [C.ROTATION_BAD_SIGNATURE],
      );
    }
  });

  it("refuses a certificate of another experiment (ROTATION_WRONG_EXPERIMENT), alone or in a list", () => {
    const other = rotate(crypto, a, b, 2, { experimentId: "exp-other" });
    expectProtocolError(
      () => verifyAuthorityRotation(crypto, other, { experimentId: EXPERIMENT }),
      [C.ROTATION_WRONG_EXPERIMENT],
    );
    expectProtocolError(
      () =>
        followAuthorityRotations(crypto, {
          from: a.publicKey,
          experimentId: EXPERIMENT,
          certificates: [other],
        }),
      [C.ROTATION_WRONG_EXPERIMENT],
    );
  });

  it("refuses a validly signed certificate that names the key it replaces, or an unusable key (MALFORMED)", () => {
    const payload = (publicKey: Uint8Array) =>
      canonicalJson({
        experimentId: EXPERIMENT,
        keyVersion: 2,
        previousPublicKey: toBase64Url(a.publicKey),
        publicKey: toBase64Url(publicKey),
        rotatedAt: NOW,
        v: 1,
      });
    const same = sealBytes(SignatureDomain.rotation, payload(a.publicKey), a, crypto);
    const smallOrder = sealBytes(SignatureDomain.rotation, payload(new Uint8Array(32)), a, crypto);
    for (const token of [same, smallOrder]) {
      expectProtocolError(
        () => verifyAuthorityRotation(crypto, token, { experimentId: EXPERIMENT }),
        [C.MALFORMED],
      );
    }
  });

  it("will not sign a rotation to the same key or to an unusable key", () => {
    expect(() => rotate(crypto, a, a, 2)).toThrow(RangeError);
    expectProtocolError(
      () =>
        signAuthorityRotation(crypto, a, {
          experimentId: EXPERIMENT,
          keyVersion: 2,
          publicKey: new Uint8Array(32),
          rotatedAt: NOW,
        }),
      [C.INVALID_KEY],
    );
  });

  it("a signature made for another kind of token does not pass as a rotation", () => {
    const text = canonicalJson({
      experimentId: EXPERIMENT,
      keyVersion: 2,
      previousPublicKey: toBase64Url(a.publicKey),
      publicKey: toBase64Url(b.publicKey),
      rotatedAt: NOW,
      v: 1,
    });
    const asControl = sealBytes(SignatureDomain.control, text, a, crypto);
    expectProtocolError(
      () => verifyAuthorityRotation(crypto, asControl, { experimentId: EXPERIMENT }),
      [C.ROTATION_BAD_SIGNATURE],
    );
  });

  describe("followAuthorityRotations", () => {
    const follow = (from: KeyPair, certificates: readonly string[]) =>
      followAuthorityRotations(crypto, { from: from.publicKey, experimentId: EXPERIMENT, certificates });

    it("returns the key unchanged when no certificate replaces it", () => {
      expect(follow(a, [])).toEqual({ publicKey: a.publicKey, latest: null, chain: [] });
      expect(follow(c, [aToB, bToC])).toEqual({ publicKey: c.publicKey, latest: null, chain: [] });
    });

    it("follows one rotation, with its version, time and the key before", () => {
      const followed = follow(a, [aToB]);
      expect(followed.publicKey).toEqual(b.publicKey);
      expect(followed.latest).toMatchObject({
        keyVersion: 2,
        rotatedAt: NOW + 2 * MINUTE,
        previousPublicKey: a.publicKey,
      });
    });

    it("follows a chain of two rotations to the newest key, whatever the order of the list", () => {
      for (const list of [
        [aToB, bToC],
        [bToC, aToB],
      ]) {
        const followed = follow(a, list);
        expect(followed.publicKey).toEqual(c.publicKey);
        expect(followed.latest).toMatchObject({ keyVersion: 3, previousPublicKey: b.publicKey });
        expect(followed.chain.map((rotation) => rotation.keyVersion)).toEqual([2, 3]);
      }
      // A node that already follows b takes only the second step.
      expect(follow(b, [aToB, bToC]).chain.map((rotation) => rotation.keyVersion)).toEqual([3]);
    });

    it("a key nobody trusted cannot take over: a valid chain from another key changes nothing", () => {
      const mallory = generateKeyPair();
      const malloryToEve = rotate(crypto, mallory, generateKeyPair(), 5);
      expect(follow(a, [malloryToEve]).publicKey).toEqual(a.publicKey);
      expect(follow(a, [aToB, malloryToEve]).publicKey).toEqual(b.publicKey);
    });

    it("refuses the whole list when any certificate in it does not verify, on the chain or not", () => {
      const tampered = tamperPayload(bToC, (payload) => {
        payload["publicKey"] = toBase64Url(generateKeyPair().publicKey);
      });
      expectProtocolError(() => follow(a, [aToB, tampered]), [C.ROTATION_BAD_SIGNATURE]);
      expectProtocolError(() => follow(c, [aToB, tampered]), [C.ROTATION_BAD_SIGNATURE]);
      expectProtocolError(() => follow(a, [aToB, "not a certificate"]), [C.MALFORMED]);
    });

    it("refuses one key replaced by two different keys (ROTATION_CONFLICT)", () => {
      const aToC = rotate(crypto, a, c, 2);
      expectProtocolError(() => follow(a, [aToB, aToC]), [C.ROTATION_CONFLICT]);
    });

    it("refuses a chain whose key versions go back, so a loop cannot be followed (ROTATION_CONFLICT)", () => {
      expectProtocolError(
        () => follow(a, [rotate(crypto, a, b, 3), rotate(crypto, b, c, 2)]),
        [C.ROTATION_CONFLICT],
      );
      expectProtocolError(() => follow(a, [aToB, rotate(crypto, b, a, 3)]), [C.ROTATION_CONFLICT]);
    });

    it(`refuses more than ${MAX_ROTATION_CERTIFICATES} certificates (OVERSIZED), and follows exactly that many`, () => {
      const keys = [a, ...Array.from({ length: MAX_ROTATION_CERTIFICATES + 1 }, () => generateKeyPair())];
      const certificates = keys
        .slice(1)
        .map((key, index) => rotate(crypto, keys[index] ?? a, key, index + 2));
      expectProtocolError(() => follow(a, certificates), [C.OVERSIZED]);
      const followed = follow(a, certificates.slice(0, MAX_ROTATION_CERTIFICATES));
      expect(followed.chain).toHaveLength(MAX_ROTATION_CERTIFICATES);
      expect(followed.publicKey).toEqual(keys[MAX_ROTATION_CERTIFICATES]?.publicKey);
    });
  });

  it("exports a grace period of minutes, long enough for nodes that ask every few seconds", () => {
    expect(DEFAULT_ROTATION_GRACE_MS).toBe(5 * MINUTE);
  });
});

describe("verifyAuthorityRotation", () => {
  const previous = generateKeyPair();
  const next = generateKeyPair();
  const fresh = (() => {
    let version = 1;
    return () =>
      signAuthorityRotation(nodeCrypto, previous, {
        experimentId: EXPERIMENT,
        keyVersion: ++version,
        publicKey: next.publicKey,
        rotatedAt: NOW,
      });
  })();
  tokenReaderSuite({
    async: false,
    read: (token) => verifyAuthorityRotation(nodeCrypto, token, { experimentId: EXPERIMENT }),
    maxLength: MAX_ROTATION_TOKEN_LENGTH,
    domain: SignatureDomain.rotation,
    signer: previous,
    signWith: nodeCrypto,
    valid: fresh(),
    fresh,
    corruptedCodes: [C.MALFORMED, C.NON_CANONICAL, C.ROTATION_BAD_SIGNATURE, C.ROTATION_WRONG_EXPERIMENT],
    badSignature: C.ROTATION_BAD_SIGNATURE,
    signatureOnlyFields: ["publicKey"],
  });
});
