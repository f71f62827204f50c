import { sha256 as nobleSha256 } from "@noble/hashes/sha2.js";
import nacl from "tweetnacl";

/** Ed25519 signatures and SHA-256, the only primitives the protocol uses. */
export interface CryptoProvider {
  readonly name: string;
  /** Signs with a 64-byte secret key (32-byte seed followed by the 32-byte public key). */
  sign(message: Uint8Array, secretKey: Uint8Array): Uint8Array;
  /** Returns false, never throws, for any malformed key or signature. */
  verify(message: Uint8Array, signature: Uint8Array, publicKey: Uint8Array): boolean;
  sha256(data: Uint8Array): Uint8Array;
}

export const PUBLIC_KEY_BYTES = 32;
export const SECRET_KEY_BYTES = 64;
export const SEED_BYTES = 32;
export const SIGNATURE_BYTES = 64;
export const SHA256_BYTES = 32;

/** Portable implementation: tweetnacl and @noble/hashes. Runs anywhere, verifies ~170/s. */
export const portableCrypto: CryptoProvider = {
  name: "tweetnacl",
  sign(message, secretKey) {
    return nacl.sign.detached(message, secretKey);
  },
  verify(message, signature, publicKey) {
    if (signature.length !== SIGNATURE_BYTES || publicKey.length !== PUBLIC_KEY_BYTES) return false;
    return nacl.sign.detached.verify(message, signature, publicKey);
  },
  sha256(data) {
    return nobleSha256(data);
  },
};
