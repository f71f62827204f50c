import { base64urlnopad } from "@scure/base";
import { z } from "zod";

/** Field schemas shared by the signed payloads. Lengths are bounded so no field can be oversized. */

export const experimentIdSchema = z
  .string()
  .min(1)
  .max(64)
  .regex(/^[A-Za-z0-9_-]+$/, "must contain only letters, digits, '_' and '-'");

export const usernameSchema = z
  .string()
  .min(1)
  .max(64)
  .regex(/^[A-Za-z0-9_.-]+$/, "must contain only letters, digits, '_', '.' and '-'");

/** What a pass is issued on: a peer token's id (the platform's row id). */
export const grantIdSchema = z
  .string()
  .min(1)
  .max(64)
  .regex(/^[A-Za-z0-9_-]+$/, "must contain only letters, digits, '_' and '-'");

/** Unix time in milliseconds. */
export const timestampSchema = z.number().int().min(0).max(Number.MAX_SAFE_INTEGER);

/** Unpadded base64url text that decodes to exactly `bytes` bytes; parses to the bytes. */
export function base64UrlField(bytes: number) {
  const message = `must be ${bytes} bytes as unpadded base64url`;
  return z
    .string()
    .length(Math.ceil((bytes * 4) / 3), message)
    .transform((text, ctx) => {
      try {
        const decoded = base64urlnopad.decode(text);
        if (decoded.length === bytes) return decoded;
      } catch {
        // reported below
      }
      ctx.addIssue({ code: "custom", message });
      return z.NEVER;
    });
}

/** What a signed request is for: an HTTP "METHOD /path" or a libp2p protocol id. */
export const scopeSchema = z
  .string()
  .min(1)
  .max(256)
  .regex(
    /^[\x21-\x7e]+( [\x21-\x7e]+)?$/,
    "must be printable ASCII, e.g. 'POST /api/v1/x' or '/barnraise/x/1'",
  );

export const NONCE_BYTES = 16;
