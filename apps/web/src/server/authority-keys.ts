import { encodePublicKey, generateKeyPair, keyPairFromSecretKey, type KeyPair } from "@barnraise/protocol";
import { openSealed, seal, type SealBinding } from "./sealing.ts";

/**
 * Experiments' authority secret keys are stored sealed (sealing.ts), bound to the experiment id and
 * key version, so a sealed key copied to another experiment's row does not open.
 */

export interface AuthorityKeyBinding {
  readonly experimentId: string;
  readonly keyVersion: number;
}

export class SealedKeyError extends Error {
  override readonly name = "SealedKeyError";
}

function binding(key: AuthorityKeyBinding): SealBinding {
  return {
    purpose: "authority-key-seal v1",
    context: `barnraise authority key\0${key.experimentId}\0${key.keyVersion}`,
  };
}

export function sealSecretKey(secretKey: Uint8Array, secret: string, key: AuthorityKeyBinding): string {
  return seal(secretKey, secret, binding(key));
}

/** Opens a sealed key with the current secret or, failing that, a previous one. */
export function openSecretKey(
  sealed: string,
  secrets: readonly string[],
  key: AuthorityKeyBinding,
): Uint8Array {
  const opened = openSealed(sealed, secrets, binding(key));
  if (opened === "malformed") throw new SealedKeyError("sealed authority key has an unknown format");
  if (opened === "not-opened") {
    throw new SealedKeyError(
      `the authority key of experiment ${key.experimentId} does not open with BARNRAISE_SECRET ` +
        "(was the secret changed without listing the old one in BARNRAISE_PREVIOUS_SECRETS?)",
    );
  }
  return opened;
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
