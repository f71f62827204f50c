import { base64urlnopad, hex } from "@scure/base";
import canonicalize from "canonicalize";
import type { z } from "zod";
import { ProtocolError, ProtocolErrorCode } from "./errors.ts";

const utf8Encoder = new TextEncoder();
// ignoreBOM keeps a leading byte-order mark in the text, so JSON.parse refuses it: one byte form per payload.
const utf8Decoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** Lower-case hexadecimal. */
export function toHex(bytes: Uint8Array): string {
  return hex.encode(bytes);
}

export function toBase64Url(bytes: Uint8Array): string {
  return base64urlnopad.encode(bytes);
}

/** Strict unpadded base64url: rejects padding, other alphabets, and non-zero trailing bits. */
export function fromBase64Url(text: string, what: string): Uint8Array {
  try {
    return base64urlnopad.decode(text);
  } catch (error) {
    throw new ProtocolError(ProtocolErrorCode.MALFORMED, `${what} is not valid unpadded base64url`, {
      cause: error,
    });
  }
}

export function fromBase64UrlExact(text: string, length: number, what: string): Uint8Array {
  const bytes = fromBase64Url(text, what);
  if (bytes.length !== length) {
    throw new ProtocolError(
      ProtocolErrorCode.MALFORMED,
      `${what} must be ${length} bytes, got ${bytes.length}`,
    );
  }
  return bytes;
}

/** RFC 8785 (JCS) canonical JSON as UTF-8 bytes. */
export function canonicalJson(value: unknown): Uint8Array {
  const text = canonicalize(value);
  if (text === undefined) throw new TypeError("value has no JSON representation");
  return utf8Encoder.encode(text);
}

/**
 * Parses payload bytes that were signed: UTF-8, JSON, canonical (so each payload has exactly one
 * byte form), then the schema. Errors never leak parser internals beyond the message.
 */
export function parseCanonicalPayload<T extends z.ZodType>(
  bytes: Uint8Array,
  schema: T,
  what: string,
): z.output<T> {
  let text: string;
  let value: unknown;
  try {
    text = utf8Decoder.decode(bytes);
    value = JSON.parse(text);
  } catch (error) {
    throw new ProtocolError(ProtocolErrorCode.MALFORMED, `${what} payload is not UTF-8 JSON`, {
      cause: error,
    });
  }
  if (canonicalOrUndefined(value) !== text) {
    throw new ProtocolError(
      ProtocolErrorCode.NON_CANONICAL,
      `${what} payload is not canonical JSON (RFC 8785)`,
    );
  }
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const where = issue && issue.path.length > 0 ? issue.path.join(".") : "payload";
    throw new ProtocolError(ProtocolErrorCode.MALFORMED, `${what} ${where}: ${issue?.message ?? "invalid"}`);
  }
  return parsed.data;
}

/** canonicalize throws for values JCS cannot represent (non-finite numbers, lone surrogates). */
function canonicalOrUndefined(value: unknown): string | undefined {
  try {
    return canonicalize(value);
  } catch {
    return undefined;
  }
}

/** Constant-time comparison of two byte strings. */
export function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= (a[i] ?? 0) ^ (b[i] ?? 0);
  return diff === 0;
}
