// The shared suite of tests every token reader must pass, registered by tokenReaderSuite.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  canonicalJson,
  portableCrypto,
  ProtocolError,
  ProtocolErrorCode,
  SignatureDomain,
  type CryptoProvider,
  type KeyPair,
} from "../src/node.ts";
import {
  C,
  SEED,
  RUNS,
  SIGNING_RUNS,
  expectProtocolError,
  expectProtocolErrorAsync,
  expectNothingButProtocolError,
  utf8,
  BASE64URL,
  ALPHANUMERIC,
  BASE64URL_CHARS,
  ALPHANUMERIC_CHARS,
  splitToken,
  joinToken,
  payloadText,
  payloadObject,
  sealBytes,
  replaceAt,
  jsonType,
  junkStringArb,
  nonStringArb,
} from "./fuzz-support.ts";

// ---------------------------------------------------------------------------------------------
// The shared suite for the five token readers
// ---------------------------------------------------------------------------------------------

type TokenReader =
  | { readonly async: false; read(token: unknown): unknown }
  | { readonly async: true; read(token: unknown): Promise<unknown> };

export type TokenEntryPoint = TokenReader & {
  readonly maxLength: number;
  readonly domain: SignatureDomain;
  /** Whose key signs this kind of token. */
  readonly signer: KeyPair;
  /** Which provider signs hand-built tokens in the properties. */
  readonly signWith: CryptoProvider;
  /** A valid token. The shared suite never lets it be accepted, so a replay guard never sees it. */
  readonly valid: string;
  /** A valid token never seen before. */
  fresh(): string;
  /** What a corrupted copy of `valid` may give; the reader must never accept it. */
  readonly corruptedCodes: readonly ProtocolErrorCode[];
  /** The code of a payload that does not match its signature; undefined if signatures are not checked. */
  readonly badSignature: ProtocolErrorCode | undefined;
  /** Payload string fields that no check looks at before the signature, so a change is BAD_SIGNATURE. */
  readonly signatureOnlyFields: readonly string[];
};

async function expectRejected(
  entry: TokenEntryPoint,
  token: unknown,
  codes?: readonly ProtocolErrorCode[],
): Promise<ProtocolError> {
  return entry.async
    ? expectProtocolErrorAsync(() => entry.read(token), codes)
    : expectProtocolError(() => entry.read(token), codes);
}

async function expectAccepted(entry: TokenEntryPoint, token: string): Promise<void> {
  await (entry.async ? entry.read(token) : Promise.resolve(entry.read(token)));
}

/** Rejected with one of `codes`, or (only when the reader checks no signature) accepted. */
async function expectRejectedUnlessUnsigned(
  entry: TokenEntryPoint,
  token: string,
  codes: readonly ProtocolErrorCode[],
): Promise<void> {
  if (entry.badSignature !== undefined) {
    await expectRejected(entry, token, codes);
  } else {
    expectNothingButProtocolError(() => entry.read(token), codes);
  }
}

/** Registers the tests every token reader must pass. */
export function tokenReaderSuite(entry: TokenEntryPoint): void {
  const payloadPartLength = entry.valid.indexOf(".");
  const validPayload = payloadObject(entry.valid);
  const canonicalText = payloadText(entry.valid);
  const fields = Object.keys(validPayload);
  /** The payload's version, as written in the canonical text, and a version no verifier takes. */
  const version = Number(validPayload["v"]);
  const versionText = `"v":${version}`;
  const otherVersion = version + 1;
  const seal = (text: string) => sealBytes(entry.domain, utf8(text), entry.signer, entry.signWith);
  // tweetnacl signs about 250 payloads a second; node:crypto can afford the full run count.
  const signingRuns = entry.signWith === portableCrypto ? SIGNING_RUNS : RUNS;
  const sealValue = (value: unknown) =>
    sealBytes(entry.domain, canonicalJson(value), entry.signer, entry.signWith);

  it("accepts a valid token (so the rejections below are meaningful)", async () => {
    await expectAccepted(entry, entry.fresh());
  });

  it("rejects arbitrary strings with MALFORMED or NON_CANONICAL (OVERSIZED when too long)", async () => {
    await fc.assert(
      fc.asyncProperty(junkStringArb(Math.min(entry.maxLength, 1500)), async (junk) => {
        const codes = junk.length > entry.maxLength ? [C.OVERSIZED] : [C.MALFORMED, C.NON_CANONICAL];
        await expectRejected(entry, junk, codes);
      }),
      RUNS,
    );
  });

  it("rejects values that are not strings with MALFORMED", async () => {
    const explicit: unknown[] = [
      undefined,
      null,
      0,
      Number.NaN,
      true,
      {},
      [],
      [entry.valid],
      new String(entry.valid),
      utf8(entry.valid),
      { toString: () => entry.valid },
      Symbol("token"),
      10n,
    ];
    for (const value of explicit) await expectRejected(entry, value, [C.MALFORMED]);
    await fc.assert(
      fc.asyncProperty(nonStringArb, async (value) => {
        await expectRejected(entry, value, [C.MALFORMED]);
      }),
      RUNS,
    );
  });

  it("rejects tokens longer than the limit with OVERSIZED, whatever they contain", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(entry.valid, "", "junk."),
        fc.integer({ min: 1, max: 3000 }),
        fc.constantFrom("A", ".", "=", "\u0000", "\u00e9", "\u{1F600}"),
        async (prefix, extra, filler) => {
          let token = prefix;
          while (token.length <= entry.maxLength + extra) token += filler;
          await expectRejected(entry, token, [C.OVERSIZED]);
        },
      ),
      { seed: SEED, numRuns: 100 },
    );
  });

  it("does not call a token of exactly the limit OVERSIZED", async () => {
    await expectRejected(entry, "A".repeat(entry.maxLength), [C.MALFORMED]);
    await expectRejected(entry, entry.valid.padEnd(entry.maxLength, "A"), [C.MALFORMED]);
  });

  it("rejects the valid token truncated at every position with MALFORMED", async () => {
    for (let end = 0; end < entry.valid.length; end++) {
      await expectRejected(entry, entry.valid.slice(0, end), [C.MALFORMED]);
    }
  });

  it("rejects a truncated payload part, signature intact, with MALFORMED", async () => {
    const signaturePart = entry.valid.slice(payloadPartLength);
    for (let end = 0; end < payloadPartLength; end++) {
      await expectRejected(entry, entry.valid.slice(0, end) + signaturePart, [C.MALFORMED]);
    }
  });

  it("rejects random character substitutions; a character outside base64url is MALFORMED", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.nat({ max: entry.valid.length - 1 }),
        fc.oneof(
          fc.constantFrom(...BASE64URL_CHARS),
          fc.constantFrom(".", "=", "+", "/", " "),
          fc.string({ minLength: 1, maxLength: 1, unit: "binary" }),
        ),
        async (index, replacement) => {
          fc.pre(entry.valid[index] !== replacement);
          const token = replaceAt(entry.valid, index, replacement);
          if (BASE64URL.includes(replacement)) {
            await expectRejectedUnlessUnsigned(entry, token, entry.corruptedCodes);
          } else {
            await expectRejected(entry, token, [C.MALFORMED]);
          }
        },
      ),
      RUNS,
    );
  });

  it("rejects a token with one payload byte changed and re-encoded", async () => {
    const parts = splitToken(entry.valid);
    await fc.assert(
      fc.asyncProperty(
        fc.nat({ max: parts.payload.length - 1 }),
        fc.oneof(fc.integer({ min: 0, max: 255 }), fc.constantFrom(...utf8(ALPHANUMERIC))),
        async (index, byte) => {
          fc.pre(parts.payload[index] !== byte);
          const payload = parts.payload.slice();
          payload[index] = byte;
          await expectRejectedUnlessUnsigned(entry, joinToken({ ...parts, payload }), entry.corruptedCodes);
        },
      ),
      RUNS,
    );
  });

  it(`${entry.badSignature ? `rejects with ${entry.badSignature}` : "does not check"} a token with one signature byte changed and re-encoded`, async () => {
    const parts = splitToken(entry.valid);
    await fc.assert(
      fc.asyncProperty(fc.nat({ max: 63 }), fc.integer({ min: 1, max: 255 }), async (index, delta) => {
        const signature = parts.signature.slice();
        signature[index] = ((signature[index] ?? 0) + delta) & 0xff;
        const token = joinToken({ ...parts, signature });
        if (entry.badSignature !== undefined) {
          await expectRejected(entry, token, [entry.badSignature]);
        } else {
          await expectAccepted(entry, token);
        }
      }),
      RUNS,
    );
  });

  it("rejects a signature cut short or extended, inside an otherwise valid token, with MALFORMED", async () => {
    const parts = splitToken(entry.valid);
    for (const length of [0, 1, 32, 62, 63, 65, 96, 128]) {
      const signature = new Uint8Array(length);
      signature.set(parts.signature.subarray(0, length));
      await expectRejected(entry, joinToken({ ...parts, signature }), [C.MALFORMED]);
    }
  });

  if (entry.signatureOnlyFields.length > 0) {
    it(`rejects a change to ${entry.signatureOnlyFields.join(" or ")} that keeps the payload valid${entry.badSignature ? `, with ${entry.badSignature}` : ""}`, async () => {
      const parts = splitToken(entry.valid);
      const spans = entry.signatureOnlyFields.map((field) => {
        const start = canonicalText.indexOf(`"${field}":"`) + field.length + 4;
        const value = validPayload[field];
        expect(start).toBeGreaterThan(field.length + 3);
        expect(typeof value).toBe("string");
        // The last character of a base64url value carries padding bits; leave it alone.
        return { start, length: (value as string).length - 1 };
      });
      await fc.assert(
        fc.asyncProperty(
          fc.constantFrom(...spans),
          fc.nat(),
          fc.constantFrom(...ALPHANUMERIC_CHARS),
          async (span, offset, replacement) => {
            const index = span.start + (offset % span.length);
            fc.pre(canonicalText[index] !== replacement);
            const payload = utf8(replaceAt(canonicalText, index, replacement));
            const token = joinToken({ ...parts, payload });
            if (entry.badSignature !== undefined) {
              await expectRejected(entry, token, [entry.badSignature]);
            } else {
              await expectAccepted(entry, token);
            }
          },
        ),
        RUNS,
      );
    });
  }

  describe("validly signed payloads that break the schema", () => {
    it("a missing field is MALFORMED", async () => {
      for (const field of fields) {
        const { [field]: _removed, ...rest } = validPayload;
        await expectRejected(entry, sealValue(rest), [C.MALFORMED]);
      }
    });

    it("an extra field is MALFORMED", async () => {
      await fc.assert(
        fc.asyncProperty(fc.string({ maxLength: 12 }), fc.jsonValue({ maxDepth: 2 }), async (key, value) => {
          fc.pre(!fields.includes(key));
          await expectRejected(entry, sealValue({ ...validPayload, [key]: value }), [C.MALFORMED]);
        }),
        signingRuns,
      );
    });

    it("a field of the wrong JSON type is MALFORMED", async () => {
      await fc.assert(
        fc.asyncProperty(fc.constantFrom(...fields), fc.jsonValue({ maxDepth: 2 }), async (field, value) => {
          fc.pre(jsonType(value) !== jsonType(validPayload[field]));
          await expectRejected(entry, sealValue({ ...validPayload, [field]: value }), [C.MALFORMED]);
        }),
        signingRuns,
      );
    });

    it("a payload that is not an object, or has another version, is MALFORMED", async () => {
      for (const value of [
        null,
        1,
        "payload",
        [],
        [validPayload],
        true,
        {},
        { ...validPayload, v: otherVersion },
      ]) {
        await expectRejected(entry, sealValue(value), [C.MALFORMED]);
      }
    });

    it("bytes that are not UTF-8 JSON are MALFORMED", async () => {
      const bad = [
        new Uint8Array(0),
        Uint8Array.of(0xff, 0xfe),
        Uint8Array.of(...utf8('{"v":"'), 0xc3, 0x28, ...utf8('"}')),
        Uint8Array.of(...utf8(canonicalText), 0x80),
        utf8(canonicalText.slice(0, -1)),
        utf8(`${canonicalText}}`),
        utf8("NaN"),
        utf8("undefined"),
      ];
      for (const payload of bad)
        await expectRejected(entry, sealBytes(entry.domain, payload, entry.signer, entry.signWith), [
          C.MALFORMED,
        ]);
    });
  });

  describe("validly signed payloads that are not canonical JSON", () => {
    it("reordered keys or added whitespace are NON_CANONICAL", async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.shuffledSubarray(fields, { minLength: fields.length, maxLength: fields.length }),
          fc.constantFrom(0, 1, 2, "\t", " "),
          async (order, indent) => {
            const reordered = Object.fromEntries(order.map((field) => [field, validPayload[field]]));
            const text = JSON.stringify(reordered, null, indent);
            fc.pre(text !== canonicalText);
            await expectRejected(entry, seal(text), [C.NON_CANONICAL]);
          },
        ),
        signingRuns,
      );
    });

    it.each([
      ["a leading space", (text: string) => ` ${text}`],
      ["a trailing newline", (text: string) => `${text}\n`],
      ["a number written 1.0", (text: string) => text.replace(versionText, `"v":${version}.0`)],
      ["a number written 1e0", (text: string) => text.replace(versionText, `"v":${version}E0`)],
      ["a duplicated key", (text: string) => text.replace("{", `{${versionText},`)],
      [
        "an escaped letter",
        (text: string) =>
          text.replace(/:"([A-Za-z])/, (_m, c: string) => `:"\\u00${c.charCodeAt(0).toString(16)}`),
      ],
      ["an escaped slash", (text: string) => text.replace(/:"([^"]*)"/, ':"$1\\/"')],
    ])("%s is NON_CANONICAL", async (_what, edit) => {
      const text = edit(canonicalText);
      expect(text).not.toBe(canonicalText);
      await expectRejected(entry, seal(text), [C.NON_CANONICAL]);
    });

    it("a UTF-8 byte order mark before canonical JSON is rejected (one payload, one byte form)", async () => {
      await expectRejected(
        entry,
        sealBytes(
          entry.domain,
          Uint8Array.of(0xef, 0xbb, 0xbf, ...utf8(canonicalText)),
          entry.signer,
          entry.signWith,
        ),
        [C.MALFORMED, C.NON_CANONICAL],
      );
    });

    it("JSON that canonicalization cannot represent (non-finite number, lone surrogate) is rejected", async () => {
      const texts = [
        canonicalText.replace(versionText, '"v":1e400'),
        canonicalText.replace(versionText, '"v":-1e999'),
        canonicalText.replace(/:"/, ':"\\ud800'),
        '"\\udfff"',
        "1e309",
      ];
      for (const text of texts) {
        await expectRejected(entry, seal(text), [C.MALFORMED, C.NON_CANONICAL]);
        await expectRejected(entry, joinToken({ payload: utf8(text), signature: new Uint8Array(64) }), [
          C.MALFORMED,
          C.NON_CANONICAL,
        ]);
      }
    });
  });

  it("keeps working after rejecting all of the above", async () => {
    const junk: unknown[] = [
      undefined,
      "",
      ".",
      "x".repeat(entry.maxLength + 1),
      entry.valid.slice(0, -1),
      entry.valid.replace(".", ".."),
      seal(" {}"),
      sealValue({ ...validPayload, v: otherVersion }),
    ];
    for (const value of junk) await expectRejected(entry, value);
    await expectAccepted(entry, entry.fresh());
    await expectAccepted(entry, entry.fresh());
  });
}
