/**
 * Shared support for the fuzz tests of every entry point that reads untrusted input
 * (malformed-*.test.ts). Whatever arrives — junk, truncated or oversized tokens, corrupted bytes,
 * or well-signed payloads of the wrong shape — the entry point must throw a ProtocolError with one
 * of the stable codes, never a TypeError, RangeError, SyntaxError or any other exception, and must
 * go on accepting valid input afterwards. This module holds what those tests share: assertion and
 * token helpers, the fixtures (an experiment, its authority, two peers, valid tokens) and the
 * input generators.
 */
import fc from "fast-check";
import {
  AccessPassVerifier,
  canonicalJson,
  fromBase64Url,
  issueAccessPass,
  keyPairFromSeed,
  MemoryNonceStore,
  nodeCrypto,
  parseExperimentConfig,
  portableCrypto,
  ReplayGuard,
  RequestVerifier,
  SignatureDomain,
  signExperimentConfig,
  signingBytes,
  signRequest,
  signResponse,
  toBase64Url,
  type CryptoProvider,
  type KeyPair,
} from "../src/node.ts";

export {
  C,
  expectNothingButProtocolError,
  expectProtocolError,
  expectProtocolErrorAsync,
} from "./expect-protocol-error.ts";

export const SEED = 0xf022;
/** Properties that only run node:crypto and parsing. */
export const RUNS = { seed: SEED, numRuns: 300 };
/** Properties that sign with tweetnacl on every run. */
export const SIGNING_RUNS = { seed: SEED, numRuns: 100 };

// ---------------------------------------------------------------------------------------------
// Token helpers
// ---------------------------------------------------------------------------------------------

export const utf8 = (text: string): Uint8Array => new TextEncoder().encode(text);
const fromUtf8 = (bytes: Uint8Array): string => new TextDecoder().decode(bytes);

export const BASE64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
export const ALPHANUMERIC = BASE64URL.slice(0, 62);
export const BASE64URL_CHARS = Array.from(BASE64URL);
export const ALPHANUMERIC_CHARS = Array.from(ALPHANUMERIC);

interface TokenParts {
  payload: Uint8Array;
  signature: Uint8Array;
}

export function splitToken(token: string): TokenParts {
  const [payload = "", signature = ""] = token.split(".");
  return {
    payload: fromBase64Url(payload, "test payload"),
    signature: fromBase64Url(signature, "test signature"),
  };
}

export function joinToken({ payload, signature }: TokenParts): string {
  return `${toBase64Url(payload)}.${toBase64Url(signature)}`;
}

/** The payload text of a token, as it was signed. */
export function payloadText(token: string): string {
  return fromUtf8(splitToken(token).payload);
}

/** The payload of a token as an object, keys in canonical order. */
export function payloadObject(token: string): Record<string, unknown> {
  return JSON.parse(payloadText(token)) as Record<string, unknown>;
}

/**
 * A token with exactly these payload bytes, validly signed, so only the form and schema checks
 * can refuse it. tweetnacl by default; node:crypto, whose signatures are byte-identical (see
 * crypto-agreement.test.ts), where a property signs hundreds of payloads.
 */
export function sealBytes(
  domain: SignatureDomain,
  payload: Uint8Array,
  signer: KeyPair,
  crypto: CryptoProvider = portableCrypto,
): string {
  return joinToken({ payload, signature: crypto.sign(signingBytes(domain, payload), signer.secretKey) });
}

export function replaceAt(text: string, index: number, replacement: string): string {
  return text.slice(0, index) + replacement + text.slice(index + 1);
}

/** The JSON type of a value, telling arrays, null and objects apart. */
export function jsonType(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  return typeof value;
}

// ---------------------------------------------------------------------------------------------
// Fixtures: an experiment, its authority, two peers and one valid token of each kind
// ---------------------------------------------------------------------------------------------

export const NOW = 1_750_000_000_000;
export const EXPERIMENT = "exp-1";
export const SCOPE = "POST /api/v1/gradients";
const MAX_SKEW_MS = 30_000;

const seedOf = (byte: number): Uint8Array => new Uint8Array(32).fill(byte);
export const authority = keyPairFromSeed(seedOf(1));
export const alice = keyPairFromSeed(seedOf(2)); // sends the request, receives the response
export const bob = keyPairFromSeed(seedOf(3)); // receives the request, sends the response
export const stranger = keyPairFromSeed(seedOf(4));

let serial = 0;
export function issuePass(peer: KeyPair, username = `user-${++serial}`): string {
  return issueAccessPass(nodeCrypto, authority, {
    experimentId: EXPERIMENT,
    username,
    role: "trainer",
    peerPublicKey: peer.publicKey,
    grant: "token-fuzz",
    issuedAt: NOW - 60_000,
    expiresAt: NOW + 3_600_000,
  });
}

export const alicePass = issuePass(alice, "alice");
const bobPass = issuePass(bob, "bob");
export const requestBody = utf8("gradient bytes");
export const responseBody = utf8("averaged bytes");
export const requestNonce = new Uint8Array(16).fill(7);

export function newRequest(nonce?: Uint8Array): string {
  return signRequest(nodeCrypto, alice, {
    pass: alicePass,
    recipientPublicKey: bob.publicKey,
    scope: SCOPE,
    body: requestBody,
    time: NOW,
    ...(nonce ? { nonce } : {}),
  });
}

export function newResponse(): string {
  return signResponse(nodeCrypto, bob, { pass: bobPass, requestNonce, body: responseBody });
}

const exampleConfig = parseExperimentConfig({ model: { kind: "albert-mlm" }, optimizer: { name: "lamb" } });
export function newConfig(): string {
  return signExperimentConfig(nodeCrypto, authority, {
    experimentId: EXPERIMENT,
    version: ++serial,
    issuedAt: NOW,
    config: exampleConfig,
  });
}

export function newPassVerifier(crypto: CryptoProvider = nodeCrypto): AccessPassVerifier {
  return new AccessPassVerifier({
    crypto,
    authorityPublicKey: authority.publicKey,
    experimentId: EXPERIMENT,
  });
}

export function newRequestVerifier(): RequestVerifier {
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

export const base64UrlText = (maxLength: number) =>
  fc.string({ unit: fc.constantFrom(...BASE64URL_CHARS), maxLength });

/** Junk strings, from random text to things shaped like tokens that are not. */
export function junkStringArb(maxLength: number): fc.Arbitrary<string> {
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
export const isWellFormed = (text: string): boolean => !/\p{Cs}/u.test(text);

export const nonStringArb = fc.anything().filter((value) => typeof value !== "string");
