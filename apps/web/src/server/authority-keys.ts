import { hkdfSync, randomBytes } from "node:crypto";
import { xchacha20poly1305 } from "@noble/ciphers/chacha.js";
import {
  encodePublicKey,
  fromBase64Url,
  generateKeyPair,
  keyPairFromSecretKey,
  toBase64Url,
  type KeyPair,
} from "@barnraise/protocol";

/**
 * Experiments' authority secret keys are stored sealed: XChaCha20-Poly1305 under a key derived
 * (HKDF-SHA256) from BARNRAISE_SECRET. The experiment id and key version are bound as associated
 * data, so a sealed key copied to another experiment's row does not open. Former secrets listed in
 * BARNRAISE_PREVIOUS_SECRETS still open old seals, which lets an operator rotate the server secret.
 *
 * Format: `v1.<24-byte nonce>.<ciphertext+tag>`, both base64url.
 */

export interface AuthorityKeyBinding {
  readonly experimentId: string;
  readonly keyVersion: number;
}

export class SealedKeyError extends Error {
  override readonly name = "SealedKeyError";
}

function sealingKey(secret: string): Uint8Array {
  return new Uint8Array(hkdfSync("sha256", secret, "barnraise", "authority-key-seal v1", 32));
}

function associatedData(binding: AuthorityKeyBinding): Uint8Array {
  return new TextEncoder().encode(`barnraise authority key\0${binding.experimentId}\0${binding.keyVersion}`);
}

export function sealSecretKey(secretKey: Uint8Array, secret: string, binding: AuthorityKeyBinding): string {
  const nonce = new Uint8Array(randomBytes(24));
  const sealed = xchacha20poly1305(sealingKey(secret), nonce, associatedData(binding)).encrypt(secretKey);
  return `v1.${toBase64Url(nonce)}.${toBase64Url(sealed)}`;
}

/** Opens a sealed key with the current secret or, failing that, a previous one. */
export function openSecretKey(
  sealed: string,
  secrets: readonly string[],
  binding: AuthorityKeyBinding,
): Uint8Array {
  const [version, nonceText, boxText] = sealed.split(".");
  if (version !== "v1" || nonceText === undefined || boxText === undefined) {
    throw new SealedKeyError("sealed authority key has an unknown format");
  }
  let nonce: Uint8Array;
  let box: Uint8Array;
  try {
    nonce = fromBase64Url(nonceText, "sealed key nonce");
    box = fromBase64Url(boxText, "sealed key");
  } catch {
    throw new SealedKeyError("sealed authority key is not valid base64url");
  }
  for (const secret of secrets) {
    try {
      return xchacha20poly1305(sealingKey(secret), nonce, associatedData(binding)).decrypt(box);
    } catch {
      // try the next secret
    }
  }
  throw new SealedKeyError(
    `the authority key of experiment ${binding.experimentId} does not open with BARNRAISE_SECRET ` +
      "(was the secret changed without listing the old one in BARNRAISE_PREVIOUS_SECRETS?)",
  );
}

export interface NewAuthorityKey {
  readonly publicKey: string;
  readonly sealedSecretKey: string;
}

/** A fresh authority key pair for an experiment, its secret half sealed with the current secret. */
export function newAuthorityKey(secrets: readonly string[], binding: AuthorityKeyBinding): NewAuthorityKey {
  const current = secrets[0];
  if (current === undefined) throw new SealedKeyError("no sealing secret is configured");
  const pair = generateKeyPair();
  return {
    publicKey: encodePublicKey(pair.publicKey),
    sealedSecretKey: sealSecretKey(pair.secretKey, current, binding),
  };
}

export function openAuthorityKeyPair(
  experiment: { id: string; authorityKeyVersion: number; authoritySecretKey: string },
  secrets: readonly string[],
): KeyPair {
  return keyPairFromSecretKey(
    openSecretKey(experiment.authoritySecretKey, secrets, {
      experimentId: experiment.id,
      keyVersion: experiment.authorityKeyVersion,
    }),
  );
}
