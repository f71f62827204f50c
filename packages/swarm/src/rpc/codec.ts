import { decode, encode } from "cborg";
import type { z } from "zod";
import { SwarmError, SwarmErrorCode } from "../errors.ts";

/** Largest CBOR head accepted on any protocol. */
export const MAX_HEAD_BYTES = 64 << 10;

/** Encodes a message as CBOR (RFC 8949, cborg's strict, deterministic encoder). */
export function encodeMessage(value: unknown): Uint8Array {
  return encode(value);
}

/**
 * Decodes CBOR and validates it against `schema`. Anything that is not exactly one well-formed
 * CBOR item matching the schema is refused with MALFORMED_MESSAGE, and oversized input with
 * OVERSIZED_MESSAGE, so a hostile peer can never make a handler see an unchecked value.
 */
export function decodeMessage<T>(
  bytes: Uint8Array,
  schema: z.ZodType<T>,
  what: string,
  maxBytes = MAX_HEAD_BYTES,
): T {
  if (bytes.length > maxBytes) {
    throw new SwarmError(
      SwarmErrorCode.OVERSIZED_MESSAGE,
      `${what} is ${bytes.length} bytes, the limit is ${maxBytes}`,
    );
  }
  let value: unknown;
  try {
    value = decode(bytes, { rejectDuplicateMapKeys: true, useMaps: false });
  } catch (cause) {
    throw new SwarmError(SwarmErrorCode.MALFORMED_MESSAGE, `${what} is not valid CBOR`, { cause });
  }
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    const issues = parsed.error.issues
      .slice(0, 5)
      .map((issue) => `${issue.path.map(String).join(".") || what}: ${issue.message}`);
    throw new SwarmError(SwarmErrorCode.MALFORMED_MESSAGE, `${what} is invalid: ${issues.join("; ")}`);
  }
  return parsed.data;
}
