// Fuzz tests for the key readers: decodePublicKey and ed25519PublicKeyFromPeerId.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  decodePublicKey,
  ed25519PublicKeyFromPeerId,
  peerIdFromEd25519PublicKey,
  toBase64Url,
} from "../src/node.ts";
import {
  C,
  RUNS,
  expectProtocolError,
  expectNothingButProtocolError,
  BASE64URL,
  BASE64URL_CHARS,
  ALPHANUMERIC_CHARS,
  replaceAt,
  alice,
  base64UrlText,
  junkStringArb,
  nonStringArb,
} from "./fuzz-support.ts";

describe("decodePublicKey", () => {
  const encoded = toBase64Url(alice.publicKey);

  it("refuses the small-order identity point as INVALID_KEY", () => {
    const identityPoint = new Uint8Array(32);
    identityPoint[0] = 1;
    expectProtocolError(() => decodePublicKey(toBase64Url(identityPoint)), [C.INVALID_KEY]);
  });

  it("accepts exactly the canonical encodings of usable keys; anything else is MALFORMED or INVALID_KEY", () => {
    let accepted = 0;
    fc.assert(
      fc.property(
        fc.oneof(
          junkStringArb(100),
          base64UrlText(44),
          fc.string({ unit: fc.constantFrom(...BASE64URL_CHARS), minLength: 43, maxLength: 43 }),
        ),
        (text) => {
          const key = expectNothingButProtocolError(
            () => decodePublicKey(text),
            [C.MALFORMED, C.INVALID_KEY],
          );
          if (key !== undefined) {
            accepted++;
            expect(key).toBeInstanceOf(Uint8Array);
            expect(toBase64Url(key as Uint8Array)).toBe(text);
          }
        },
      ),
      RUNS,
    );
    expect(accepted).toBeGreaterThan(0);
  });

  it("rejects values that are not strings with MALFORMED", () => {
    for (const value of [undefined, null, 0, {}, [], [encoded], new String(encoded), alice.publicKey]) {
      expectProtocolError(() => decodePublicKey(value as string), [C.MALFORMED]);
    }
    fc.assert(
      fc.property(nonStringArb, (value) => {
        expectProtocolError(() => decodePublicKey(value as string), [C.MALFORMED]);
      }),
      RUNS,
    );
  });

  it("rejects a valid encoding truncated, extended, padded or with a foreign character", () => {
    for (let end = 0; end < encoded.length; end++) {
      expectProtocolError(() => decodePublicKey(encoded.slice(0, end)), [C.MALFORMED]);
    }
    for (const text of [`${encoded}A`, `${encoded}AAAA`, `${encoded}=`, ` ${encoded}`, "A".repeat(10_000)]) {
      expectProtocolError(() => decodePublicKey(text), [C.MALFORMED]);
    }
    fc.assert(
      fc.property(
        fc.nat({ max: encoded.length - 1 }),
        fc.string({ minLength: 1, maxLength: 1, unit: "binary" }),
        (index, char) => {
          fc.pre(!BASE64URL.includes(char));
          expectProtocolError(() => decodePublicKey(replaceAt(encoded, index, char)), [C.MALFORMED]);
        },
      ),
      RUNS,
    );
  });

  it("rejects non-zero padding bits in the last character", () => {
    const last = BASE64URL.indexOf(encoded.at(-1) ?? "A");
    for (let bits = 1; bits < 4; bits++) {
      expectProtocolError(
        () => decodePublicKey(encoded.slice(0, -1) + (BASE64URL[last ^ bits] ?? "")),
        [C.MALFORMED],
      );
    }
    expect(decodePublicKey(encoded)).toEqual(alice.publicKey);
  });
});

describe("ed25519PublicKeyFromPeerId", () => {
  const peerIdText = peerIdFromEd25519PublicKey(alice.publicKey).toString();
  const codes = [C.MALFORMED, C.PEER_ID_NOT_ED25519];

  it("rejects arbitrary strings with MALFORMED or PEER_ID_NOT_ED25519", () => {
    fc.assert(
      fc.property(junkStringArb(200), (text) => {
        expectProtocolError(() => ed25519PublicKeyFromPeerId(text), codes);
      }),
      RUNS,
    );
  });

  it("rejects a PeerId string truncated at every position with MALFORMED", () => {
    for (let end = 0; end < peerIdText.length; end++) {
      expectProtocolError(() => ed25519PublicKeyFromPeerId(peerIdText.slice(0, end)), [C.MALFORMED]);
    }
    expect(ed25519PublicKeyFromPeerId(peerIdText)).toEqual(alice.publicKey);
  });

  it("a PeerId string with a character substituted is rejected, or is the PeerId of the key it returns", () => {
    fc.assert(
      fc.property(
        fc.nat({ max: peerIdText.length - 1 }),
        fc.oneof(
          fc.constantFrom(...ALPHANUMERIC_CHARS),
          fc.string({ minLength: 1, maxLength: 1, unit: "binary" }),
        ),
        (index, char) => {
          fc.pre(peerIdText[index] !== char);
          const text = replaceAt(peerIdText, index, char);
          const key = expectNothingButProtocolError(() => ed25519PublicKeyFromPeerId(text), codes);
          if (key !== undefined) expect(peerIdFromEd25519PublicKey(key as Uint8Array).toString()).toBe(text);
        },
      ),
      RUNS,
    );
  });

  it("rejects values that are neither a string nor a PeerId with a ProtocolError", () => {
    const values: unknown[] = [undefined, null, 0, {}, [], { type: "Ed25519" }, { toString: 0 }];
    for (const value of values) {
      expectProtocolError(() => ed25519PublicKeyFromPeerId(value as string), codes);
    }
    fc.assert(
      fc.property(nonStringArb, (value) => {
        expectProtocolError(() => ed25519PublicKeyFromPeerId(value as string), codes);
      }),
      RUNS,
    );
  });
});
