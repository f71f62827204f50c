import { ed25519 } from "@noble/curves/ed25519.js";
import { sha256 as nobleSha256 } from "@noble/hashes/sha2.js";
import nacl from "tweetnacl";

/** Ed25519 signatures and SHA-256, the only primitives the protocol uses. */
export interface CryptoProvider {
  readonly name: string;
  /** Signs with a 64-byte secret key (32-byte seed followed by the 32-byte public key). */
  sign(message: Uint8Array, secretKey: Uint8Array): Uint8Array;
  /**
   * Strict RFC 8032 verification: refuses non-canonical signatures (S ≥ L) and small-order public
   * keys, so every provider accepts exactly the same signatures. Returns false, never throws.
   */
  verify(message: Uint8Array, signature: Uint8Array, publicKey: Uint8Array): boolean;
  sha256(data: Uint8Array): Uint8Array;
}

export const PUBLIC_KEY_BYTES = 32;
export const SECRET_KEY_BYTES = 64;
export const SEED_BYTES = 32;
export const SIGNATURE_BYTES = 64;
export const SHA256_BYTES = 32;

/** The order L of the Ed25519 base point. */
const GROUP_ORDER = ed25519.Point.CURVE().n;

/** S, the second half of a signature, read as a little-endian integer, must be below L (RFC 8032 §5.1.7). */
function hasCanonicalScalar(signature: Uint8Array): boolean {
  let s = 0n;
  for (let i = SIGNATURE_BYTES - 1; i >= 32; i--) s = (s << 8n) | BigInt(signature[i] ?? 0);
  return s < GROUP_ORDER;
}

/**
 * A public key is usable when it is the canonical encoding of a curve point of large order. A
 * small-order key admits signatures that verify for any message, so it is refused everywhere.
 */
export function isUsablePublicKey(publicKey: Uint8Array): boolean {
  if (publicKey.length !== PUBLIC_KEY_BYTES) return false;
  try {
    return !ed25519.Point.fromBytes(publicKey, false).isSmallOrder();
  } catch {
    return false;
  }
}

/** Portable implementation: tweetnacl and @noble/hashes. Runs anywhere, verifies ~170/s. */
export const portableCrypto: CryptoProvider = {
  name: "tweetnacl",
  sign(message, secretKey) {
    return nacl.sign.detached(message, secretKey);
  },
  verify(message, signature, publicKey) {
    if (signature.length !== SIGNATURE_BYTES || !hasCanonicalScalar(signature)) return false;
    if (!isUsablePublicKey(publicKey)) return false;
    return nacl.sign.detached.verify(message, signature, publicKey);
  },
  sha256(data) {
    return nobleSha256(data);
  },
};
