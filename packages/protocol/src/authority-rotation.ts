import { z } from "zod";
import type { CryptoProvider } from "./crypto-provider.ts";
import { isUsablePublicKey, PUBLIC_KEY_BYTES } from "./crypto-provider.ts";
import { equalBytes } from "./encoding.ts";
import { ProtocolError, ProtocolErrorCode } from "./errors.ts";
import { base64UrlField, experimentIdSchema, timestampSchema } from "./fields.ts";
import { encodePublicKey, type KeyPair } from "./keys.ts";
import { openToken, sealToken, SignatureDomain, verifyTokenSignature } from "./signed-message.ts";

/**
 * Authority rotation certificate (DESIGN §9: a key rotation reaches every peer): when the organizer
 * replaces an experiment's authority key, the platform signs, with the key being replaced, a
 * certificate naming the new key. A node that trusts the old key can then trust the new one on the
 * old key's word, without trusting whoever handed it the certificate: a chain of certificates, each
 * signed by the key it replaces, leads a node from the key it pinned to the current one however many
 * rotations it missed (up to MAX_ROTATION_CERTIFICATES).
 *
 * - `keyVersion` is the version the new key got; it grows along a chain.
 * - `rotatedAt` is when the old key stopped signing: passes it signed before then stay good for a
 *   grace period after it (see AccessPassVerifier#trustRotation), so running nodes have time to hear
 *   of the rotation and fetch passes of the new key.
 */

export const MAX_ROTATION_TOKEN_LENGTH = 1024;
/** Most certificates a node follows at once (the platform lists the latest ones). */
export const MAX_ROTATION_CERTIFICATES = 16;
/**
 * How long after a rotation passes of the previous key (issued before it) still verify, and
 * requests addressed to the previous key are still taken: the time every running node has to hear
 * of the rotation (nodes ask every 5 s) and fetch a pass of the new key.
 */
export const DEFAULT_ROTATION_GRACE_MS = 5 * 60_000;

const rotationPayloadSchema = z.strictObject({
  v: z.literal(1),
  experimentId: experimentIdSchema,
  keyVersion: z.number().int().min(1).max(Number.MAX_SAFE_INTEGER),
  publicKey: base64UrlField(PUBLIC_KEY_BYTES),
  previousPublicKey: base64UrlField(PUBLIC_KEY_BYTES),
  rotatedAt: timestampSchema,
});

export interface AuthorityRotationInit {
  readonly experimentId: string;
  /** The version the new key gets. */
  readonly keyVersion: number;
  /** The new authority public key. */
  readonly publicKey: Uint8Array;
  /** Unix ms: when the previous key stopped signing. */
  readonly rotatedAt: number;
}

export interface AuthorityRotation extends AuthorityRotationInit {
  /** The key replaced, which signed this certificate. */
  readonly previousPublicKey: Uint8Array;
  /** The compact token it was read from. */
  readonly token: string;
}

/** Signs, with the key being replaced, the certificate naming its successor. Returns the compact token. */
export function signAuthorityRotation(
  crypto: CryptoProvider,
  previous: KeyPair,
  init: AuthorityRotationInit,
): string {
  if (!isUsablePublicKey(init.publicKey)) {
    throw new ProtocolError(
      ProtocolErrorCode.INVALID_KEY,
      "the new authority key is not a usable Ed25519 key",
    );
  }
  if (equalBytes(init.publicKey, previous.publicKey)) {
    throw new RangeError("a rotation must name another key than the one it replaces");
  }
  const payload: z.input<typeof rotationPayloadSchema> = {
    v: 1,
    experimentId: init.experimentId,
    keyVersion: init.keyVersion,
    publicKey: encodePublicKey(init.publicKey),
    previousPublicKey: encodePublicKey(previous.publicKey),
    rotatedAt: init.rotatedAt,
  };
  rotationPayloadSchema.parse(payload);
  return sealToken(crypto, SignatureDomain.rotation, payload, previous.secretKey);
}

/**
 * Checks that a certificate is signed by the key it replaces (its own `previousPublicKey`) and is
 * for `experimentId`. It says nothing about whether that key is trusted: that is for the caller
 * (`followAuthorityRotations` starts from a trusted key). Throws ProtocolError otherwise.
 */
export function verifyAuthorityRotation(
  crypto: CryptoProvider,
  token: unknown,
  expected: { experimentId: string },
): AuthorityRotation {
  const opened = openToken(token, rotationPayloadSchema, MAX_ROTATION_TOKEN_LENGTH, "authority rotation");
  const { payload } = opened;
  if (!verifyTokenSignature(crypto, SignatureDomain.rotation, opened, payload.previousPublicKey)) {
    throw new ProtocolError(
      ProtocolErrorCode.ROTATION_BAD_SIGNATURE,
      "authority rotation certificate is not signed by the key it replaces",
    );
  }
  if (payload.experimentId !== expected.experimentId) {
    throw new ProtocolError(
      ProtocolErrorCode.ROTATION_WRONG_EXPERIMENT,
      `authority rotation certificate is for experiment ${payload.experimentId}, not ${expected.experimentId}`,
    );
  }
  if (equalBytes(payload.publicKey, payload.previousPublicKey) || !isUsablePublicKey(payload.publicKey)) {
    throw new ProtocolError(
      ProtocolErrorCode.MALFORMED,
      "authority rotation certificate names an unusable key, or the key it replaces",
    );
  }
  return {
    experimentId: payload.experimentId,
    keyVersion: payload.keyVersion,
    publicKey: payload.publicKey,
    previousPublicKey: payload.previousPublicKey,
    rotatedAt: payload.rotatedAt,
    token: token as string,
  };
}

export interface FollowRotationsInit {
  /** The key the caller trusts now (pinned, or learned before). */
  readonly from: Uint8Array;
  readonly experimentId: string;
  /** Certificates as the platform lists them (any order; the platform sends the newest last). */
  readonly certificates: readonly string[];
}

export interface FollowedAuthority {
  /** The newest key reachable from `from`; `from` itself when no certificate replaces it. */
  readonly publicKey: Uint8Array;
  /**
   * The certificate that made `publicKey` current (its keyVersion, rotatedAt and the key before
   * it), or null when `publicKey` is `from`.
   */
  readonly latest: AuthorityRotation | null;
  /** The certificates followed, oldest first. */
  readonly chain: readonly AuthorityRotation[];
}

/**
 * The newest authority key reachable from `from` by a chain of certificates, each signed by the key
 * it replaces. Every certificate given must verify (ROTATION_BAD_SIGNATURE,
 * ROTATION_WRONG_EXPERIMENT, MALFORMED …), whether or not it is on the chain: a list with a bad one
 * in it was tampered with. Two certificates replacing one key with different keys, or a chain whose
 * key versions do not grow, are ROTATION_CONFLICT; more than MAX_ROTATION_CERTIFICATES is OVERSIZED.
 */
export function followAuthorityRotations(
  crypto: CryptoProvider,
  init: FollowRotationsInit,
): FollowedAuthority {
  if (init.certificates.length > MAX_ROTATION_CERTIFICATES) {
    throw new ProtocolError(
      ProtocolErrorCode.OVERSIZED,
      `${init.certificates.length} authority rotation certificates, the limit is ${MAX_ROTATION_CERTIFICATES}`,
    );
  }
  const rotations = init.certificates.map((token) =>
    verifyAuthorityRotation(crypto, token, { experimentId: init.experimentId }),
  );
  const chain: AuthorityRotation[] = [];
  let current = init.from;
  for (;;) {
    const next = successorOf(current, rotations);
    if (next === undefined) break;
    const last = chain.at(-1);
    if (last !== undefined && next.keyVersion <= last.keyVersion) {
      throw new ProtocolError(
        ProtocolErrorCode.ROTATION_CONFLICT,
        `authority rotation to key version ${next.keyVersion} follows version ${last.keyVersion}: key versions must grow`,
      );
    }
    chain.push(next);
    current = next.publicKey;
  }
  return { publicKey: current, latest: chain.at(-1) ?? null, chain };
}

/** The certificate replacing `key`, if any; two naming different successors are a conflict. */
function successorOf(
  key: Uint8Array,
  rotations: readonly AuthorityRotation[],
): AuthorityRotation | undefined {
  let found: AuthorityRotation | undefined;
  for (const rotation of rotations) {
    if (!equalBytes(rotation.previousPublicKey, key)) continue;
    if (found !== undefined && !equalBytes(found.publicKey, rotation.publicKey)) {
      throw new ProtocolError(
        ProtocolErrorCode.ROTATION_CONFLICT,
        "two authority rotation certificates replace one key with different keys",
      );
    }
    if (found === undefined || rotation.keyVersion > found.keyVersion) found = rotation;
  }
  return found;
}
