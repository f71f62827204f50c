import type { z } from "zod";
import type { CryptoProvider } from "./crypto-provider.ts";
import { SIGNATURE_BYTES } from "./crypto-provider.ts";
import {
  canonicalJson,
  fromBase64Url,
  fromBase64UrlExact,
  parseCanonicalPayload,
  toBase64Url,
} from "./encoding.ts";
import { ProtocolError, ProtocolErrorCode } from "./errors.ts";

/**
 * The version of the wire formats below (every domain tag ends in it). The platform publishes it
 * beside the programs it serves, so a volunteer can tell which platforms a build speaks to.
 */
export const PROTOCOL_VERSION = 1;

/**
 * Each kind of signed message has its own domain tag, so a signature made for one kind can never
 * be accepted as another (a pass signature as a config signature, say).
 */
export const SignatureDomain = {
  pass: "barnraise/pass/v1",
  request: "barnraise/request/v1",
  response: "barnraise/response/v1",
  config: "barnraise/config/v1",
  control: "barnraise/control/v1",
  checkpoint: "barnraise/checkpoint/v1",
  rotation: "barnraise/rotation/v1",
} as const;

export type SignatureDomain = (typeof SignatureDomain)[keyof typeof SignatureDomain];

const encoder = new TextEncoder();

/** The exact bytes that are signed: UTF-8 domain tag, one zero byte, then the payload bytes. */
export function signingBytes(domain: SignatureDomain, payload: Uint8Array): Uint8Array {
  const tag = encoder.encode(domain);
  const out = new Uint8Array(tag.length + 1 + payload.length);
  out.set(tag, 0);
  out.set(payload, tag.length + 1);
  return out;
}

/** A compact token: `base64url(payload) "." base64url(signature)`. */
export function sealToken(
  crypto: CryptoProvider,
  domain: SignatureDomain,
  payload: unknown,
  secretKey: Uint8Array,
): string {
  const bytes = canonicalJson(payload);
  const signature = crypto.sign(signingBytes(domain, bytes), secretKey);
  return `${toBase64Url(bytes)}.${toBase64Url(signature)}`;
}

export interface OpenedToken<T> {
  readonly payload: T;
  readonly payloadBytes: Uint8Array;
  readonly signature: Uint8Array;
}

/**
 * Splits and decodes a compact token and validates its payload against the schema. It does NOT
 * check the signature: the caller does, once it knows which key must have signed.
 */
export function openToken<T extends z.ZodType>(
  token: unknown,
  schema: T,
  maxLength: number,
  what: string,
): OpenedToken<z.output<T>> {
  if (typeof token !== "string") {
    throw new ProtocolError(ProtocolErrorCode.MALFORMED, `${what} must be a string`);
  }
  if (token.length > maxLength) {
    throw new ProtocolError(
      ProtocolErrorCode.OVERSIZED,
      `${what} is ${token.length} characters, the limit is ${maxLength}`,
    );
  }
  const dot = token.indexOf(".");
  if (dot <= 0 || dot !== token.lastIndexOf(".")) {
    throw new ProtocolError(ProtocolErrorCode.MALFORMED, `${what} must be two base64url parts joined by "."`);
  }
  const payloadBytes = fromBase64Url(token.slice(0, dot), `${what} payload`);
  const signature = fromBase64UrlExact(token.slice(dot + 1), SIGNATURE_BYTES, `${what} signature`);
  const payload = parseCanonicalPayload(payloadBytes, schema, what);
  return { payload, payloadBytes, signature };
}

export function verifyTokenSignature(
  crypto: CryptoProvider,
  domain: SignatureDomain,
  opened: OpenedToken<unknown>,
  publicKey: Uint8Array,
): boolean {
  return crypto.verify(signingBytes(domain, opened.payloadBytes), opened.signature, publicKey);
}
