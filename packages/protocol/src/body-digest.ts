import type { CryptoProvider } from "./crypto-provider.ts";
import { SHA256_BYTES } from "./crypto-provider.ts";
import { ProtocolError, ProtocolErrorCode } from "./errors.ts";
import { equalBytes } from "./encoding.ts";

/**
 * The body of a signed message, given as bytes, or as its SHA-256 when the caller hashed a stream.
 */
export type Body = Uint8Array | { readonly sha256: Uint8Array };

export function bodyDigest(crypto: CryptoProvider, body: Body): Uint8Array {
  if (body instanceof Uint8Array) return crypto.sha256(body);
  if (body.sha256.length !== SHA256_BYTES) throw new RangeError("sha256 digest must be 32 bytes");
  return body.sha256;
}

export function checkBodyDigest(expected: Uint8Array, actual: Uint8Array): void {
  if (!equalBytes(expected, actual)) {
    throw new ProtocolError(ProtocolErrorCode.BODY_MISMATCH, "body does not match the signed SHA-256 digest");
  }
}
