import { LRUCache } from "lru-cache";
import { z } from "zod";
import type { CryptoProvider } from "./crypto-provider.ts";
import { isUsablePublicKey, PUBLIC_KEY_BYTES } from "./crypto-provider.ts";
import { ProtocolError, ProtocolErrorCode } from "./errors.ts";
import { DEFAULT_ROTATION_GRACE_MS, MAX_ROTATION_CERTIFICATES } from "./authority-rotation.ts";
import { equalBytes } from "./encoding.ts";
import { encodePublicKey, type KeyPair } from "./keys.ts";
import { openToken, sealToken, SignatureDomain, verifyTokenSignature } from "./signed-message.ts";
import {
  base64UrlField,
  experimentIdSchema,
  grantIdSchema,
  timestampSchema,
  usernameSchema,
} from "./fields.ts";

export const MAX_PASS_TOKEN_LENGTH = 1024;
/** Clock skew tolerated when checking a pass's issued-at against the verifier's clock. */
export const DEFAULT_MAX_SKEW_MS = 30_000;

export const PeerRole = { trainer: "trainer", aux: "aux" } as const;
export type PeerRole = (typeof PeerRole)[keyof typeof PeerRole];

const passPayloadSchema = z.strictObject({
  v: z.literal(2),
  experimentId: experimentIdSchema,
  username: usernameSchema,
  role: z.enum([PeerRole.trainer, PeerRole.aux]),
  peerPublicKey: base64UrlField(PUBLIC_KEY_BYTES),
  grant: grantIdSchema,
  issuedAt: timestampSchema,
  expiresAt: timestampSchema,
});

export interface AccessPass {
  readonly experimentId: string;
  readonly username: string;
  readonly role: PeerRole;
  readonly peerPublicKey: Uint8Array;
  /**
   * What the platform issued this pass on: the id of the peer token the node joined with. Revoking
   * that token revokes every pass issued on it (the run control lists the grant), and nothing else:
   * the same node key joining again with another token gets a pass that is not revoked.
   */
  readonly grant: string;
  /** Unix time in milliseconds. */
  readonly issuedAt: number;
  /** Unix time in milliseconds. */
  readonly expiresAt: number;
  /** The compact token this pass was read from, to forward it unchanged. */
  readonly token: string;
}

export interface IssuePassInit {
  experimentId: string;
  username: string;
  role: PeerRole;
  peerPublicKey: Uint8Array;
  /** The id of the peer token the pass is issued on (see AccessPass.grant). */
  grant: string;
  issuedAt: number;
  expiresAt: number;
}

/** Signs an access pass with the experiment's authority key. Returns the compact token. */
export function issueAccessPass(crypto: CryptoProvider, authority: KeyPair, init: IssuePassInit): string {
  if (!(init.expiresAt > init.issuedAt)) {
    throw new RangeError("a pass must expire after it is issued");
  }
  if (!isUsablePublicKey(init.peerPublicKey)) {
    throw new ProtocolError(ProtocolErrorCode.INVALID_KEY, "peer public key is not a usable Ed25519 key");
  }
  const payload: z.input<typeof passPayloadSchema> = {
    v: 2,
    experimentId: init.experimentId,
    username: init.username,
    role: init.role,
    peerPublicKey: encodePublicKey(init.peerPublicKey),
    grant: init.grant,
    issuedAt: init.issuedAt,
    expiresAt: init.expiresAt,
  };
  // Validate what we sign with the same schema verifiers use, so we never issue a pass nobody accepts.
  passPayloadSchema.parse(payload);
  return sealToken(crypto, SignatureDomain.pass, payload, authority.secretKey);
}

/** Reads a pass without checking its signature, e.g. to show it. Never use the result for authorization. */
export function decodeAccessPassUnverified(token: string): AccessPass {
  return toAccessPass(
    openToken(token, passPayloadSchema, MAX_PASS_TOKEN_LENGTH, "access pass").payload,
    token,
  );
}

/** The revocations of a run control, as `AccessPassVerifier#setRevoked` takes them. */
export interface RevocationList {
  /** Users banned or removed from the experiment: every pass naming them. */
  readonly usernames: readonly string[];
  /** Revoked peer tokens' ids: every pass issued on them. */
  readonly grants: readonly string[];
}

/** What a pass of a revoked grant is refused with; peers show it to the refused node's owner. */
export const REVOKED_GRANT_REASON = "the token this node joined with was revoked";

export interface PassVerifierOptions {
  crypto: CryptoProvider;
  authorityPublicKey: Uint8Array;
  experimentId: string;
  maxSkewMs?: number;
  /** How many verified passes to remember, so each pass's signature is checked once. */
  cacheSize?: number;
}

export interface PassCheck {
  now: number;
  /** Roles accepted here; all roles when omitted. */
  roles?: readonly PeerRole[];
}

/** What `AccessPassVerifier#trustRotation` takes: a rotation of the experiment's authority key. */
export interface TrustedRotation {
  /** The authority's key from now on. */
  readonly publicKey: Uint8Array;
  /** The key it replaced. */
  readonly previousPublicKey: Uint8Array;
  /** Unix ms: when the previous key stopped signing. */
  readonly rotatedAt: number;
  /** How long after `rotatedAt` passes of the previous key still verify; default DEFAULT_ROTATION_GRACE_MS. */
  readonly graceMs?: number;
}

/** A replaced authority key and how long its passes still count. */
interface PreviousKey {
  readonly publicKey: Uint8Array;
  readonly rotatedAt: number;
  /** Passes of this key are refused from this time (Unix ms) on. */
  readonly until: number;
}

/** A pass whose signature checked out, and the key that signed it. */
interface VerifiedEntry {
  readonly pass: AccessPass;
  readonly signer: Uint8Array;
}

/**
 * Verifies access passes for one experiment. A pass's signature is checked once and remembered
 * (it is immutable) with the key that signed it; time, experiment, role, revocation and whether
 * that key is still trusted are checked on every call.
 *
 * After `trustRotation`, passes of the new key verify, and passes of the key it replaced verify only
 * when they were issued before the rotation and only until the grace period after it ends
 * (PASS_KEY_ROTATED otherwise). Each replaced key keeps its own grace, so a verifier that learns two
 * rotations in a row (one call per certificate, oldest first) still takes passes of the first key
 * for the rest of its grace. Passes of a key that was never trusted are PASS_BAD_SIGNATURE.
 */
export class AccessPassVerifier {
  readonly #crypto: CryptoProvider;
  #authorityPublicKey: Uint8Array;
  /** Replaced keys, oldest first, at most MAX_ROTATION_CERTIFICATES. */
  #previous: PreviousKey[] = [];
  readonly #experimentId: string;
  readonly #maxSkewMs: number;
  readonly #verified: LRUCache<string, VerifiedEntry>;
  #revokedUsernames: ReadonlySet<string> = new Set();
  #revokedGrants: ReadonlySet<string> = new Set();

  constructor(options: PassVerifierOptions) {
    if (options.authorityPublicKey.length !== PUBLIC_KEY_BYTES) {
      throw new ProtocolError(ProtocolErrorCode.INVALID_KEY, "authority public key must be 32 bytes");
    }
    this.#crypto = options.crypto;
    this.#authorityPublicKey = options.authorityPublicKey;
    this.#experimentId = options.experimentId;
    this.#maxSkewMs = options.maxSkewMs ?? DEFAULT_MAX_SKEW_MS;
    this.#verified = new LRUCache({ max: options.cacheSize ?? 10_000 });
  }

  get experimentId(): string {
    return this.#experimentId;
  }

  /** The authority key passes are verified with (the newest one trusted). */
  get authorityPublicKey(): Uint8Array {
    return this.#authorityPublicKey;
  }

  /**
   * Trusts a rotation of the authority key, which the caller has verified (a certificate chain
   * from a key it trusts, see `followAuthorityRotations`; one call per certificate, oldest first):
   * from now on passes signed by `publicKey` verify, and passes signed by `previousPublicKey` verify
   * only if they were issued before `rotatedAt`, and only until `rotatedAt + graceMs`. Keys replaced
   * before keep their own grace; the key trusted until now, when it is neither (a jump over
   * rotations the caller did not show), is no longer trusted.
   */
  trustRotation(rotation: TrustedRotation): void {
    if (
      rotation.publicKey.length !== PUBLIC_KEY_BYTES ||
      rotation.previousPublicKey.length !== PUBLIC_KEY_BYTES
    ) {
      throw new ProtocolError(ProtocolErrorCode.INVALID_KEY, "authority public keys must be 32 bytes");
    }
    if (equalBytes(rotation.publicKey, rotation.previousPublicKey)) {
      throw new RangeError("a rotation must name another key than the one it replaces");
    }
    const graceMs = rotation.graceMs ?? DEFAULT_ROTATION_GRACE_MS;
    if (!(graceMs >= 0)) throw new RangeError("graceMs must not be negative");
    const replaced = {
      publicKey: rotation.previousPublicKey,
      rotatedAt: rotation.rotatedAt,
      until: rotation.rotatedAt + graceMs,
    };
    // A key is listed once, and the current key is never listed as replaced.
    this.#previous = this.#previous.filter(
      (key) =>
        !equalBytes(key.publicKey, replaced.publicKey) && !equalBytes(key.publicKey, rotation.publicKey),
    );
    this.#previous.push(replaced);
    if (this.#previous.length > MAX_ROTATION_CERTIFICATES) this.#previous.shift();
    this.#authorityPublicKey = rotation.publicKey;
  }

  /**
   * Whether `token`, a pass, is signed by the current authority key (not by the previous one, in
   * its grace period): a node holding a pass of the previous key should fetch a new one.
   */
  signedByCurrentKey(token: string): boolean {
    const entry = this.#verified.get(token);
    if (entry !== undefined) return equalBytes(entry.signer, this.#authorityPublicKey);
    try {
      const opened = openToken(token, passPayloadSchema, MAX_PASS_TOKEN_LENGTH, "access pass");
      return verifyTokenSignature(this.#crypto, SignatureDomain.pass, opened, this.#authorityPublicKey);
    } catch {
      return false;
    }
  }

  /**
   * Replaces the revocation list (from the newest run control): passes of these usernames, and
   * passes issued on these grants (revoked tokens), are refused with PASS_REVOKED from now on,
   * however long they still run. A node key is never revoked as such: the same key with a pass of
   * another grant is accepted.
   */
  setRevoked(revoked: RevocationList): void {
    this.#revokedUsernames = new Set(revoked.usernames);
    this.#revokedGrants = new Set(revoked.grants);
  }

  /** Why `pass` is revoked, or undefined when it is not. */
  revocationOf(pass: Pick<AccessPass, "username" | "grant">): string | undefined {
    if (this.#revokedUsernames.has(pass.username)) {
      return `${pass.username} was banned or removed from this experiment`;
    }
    if (this.#revokedGrants.has(pass.grant)) return REVOKED_GRANT_REASON;
    return undefined;
  }

  verify(token: unknown, check: PassCheck): AccessPass {
    const cached = typeof token === "string" ? this.#verified.get(token) : undefined;
    const entry = cached ?? this.#verifySignature(token);
    const verified = entry.pass;
    this.#checkSigner(entry, check.now);
    if (verified.experimentId !== this.#experimentId) {
      throw new ProtocolError(
        ProtocolErrorCode.PASS_WRONG_EXPERIMENT,
        `pass is for experiment ${verified.experimentId}, not ${this.#experimentId}`,
      );
    }
    if (check.now >= verified.expiresAt) {
      throw new ProtocolError(
        ProtocolErrorCode.PASS_EXPIRED,
        `pass expired at ${new Date(verified.expiresAt).toISOString()}`,
      );
    }
    if (verified.issuedAt > check.now + this.#maxSkewMs) {
      throw new ProtocolError(
        ProtocolErrorCode.PASS_NOT_YET_VALID,
        `pass is issued at ${new Date(verified.issuedAt).toISOString()}, in the future`,
      );
    }
    if (check.roles !== undefined && !check.roles.includes(verified.role)) {
      throw new ProtocolError(
        ProtocolErrorCode.PASS_WRONG_ROLE,
        `role ${verified.role} is not accepted here`,
      );
    }
    const revoked = this.revocationOf(verified);
    if (revoked !== undefined) throw new ProtocolError(ProtocolErrorCode.PASS_REVOKED, revoked);
    return verified;
  }

  /** Whether the key that signed a remembered pass is still trusted for it at `now`. */
  #checkSigner(entry: VerifiedEntry, now: number): void {
    if (equalBytes(entry.signer, this.#authorityPublicKey)) return;
    const replaced = this.#previous.find((key) => equalBytes(key.publicKey, entry.signer));
    // Signed by a key trusted once and dropped since: as if it never verified.
    if (replaced === undefined) throw badSignature();
    const rotatedAt = new Date(replaced.rotatedAt).toISOString();
    if (entry.pass.issuedAt >= replaced.rotatedAt) {
      throw new ProtocolError(
        ProtocolErrorCode.PASS_KEY_ROTATED,
        `pass is signed by a replaced authority key of the experiment but issued after it was replaced at ${rotatedAt}; join again for a pass of the new key`,
      );
    }
    if (now >= replaced.until) {
      throw new ProtocolError(
        ProtocolErrorCode.PASS_KEY_ROTATED,
        `pass is signed by an authority key of the experiment replaced at ${rotatedAt}, whose grace period ended at ${new Date(replaced.until).toISOString()}; join again for a pass of the new key`,
      );
    }
  }

  #verifySignature(token: unknown): VerifiedEntry {
    const opened = openToken(token, passPayloadSchema, MAX_PASS_TOKEN_LENGTH, "access pass");
    const signer = [this.#authorityPublicKey, ...this.#previous.map((key) => key.publicKey).reverse()].find(
      (key) => verifyTokenSignature(this.#crypto, SignatureDomain.pass, opened, key),
    );
    if (signer === undefined) throw badSignature();
    const entry = { pass: toAccessPass(opened.payload, token as string), signer };
    this.#verified.set(entry.pass.token, entry);
    return entry;
  }
}

function badSignature(): ProtocolError {
  return new ProtocolError(
    ProtocolErrorCode.PASS_BAD_SIGNATURE,
    "access pass is not signed by this experiment's authority",
  );
}

function toAccessPass(payload: z.output<typeof passPayloadSchema>, token: string): AccessPass {
  if (payload.expiresAt <= payload.issuedAt) {
    throw new ProtocolError(ProtocolErrorCode.MALFORMED, "access pass expiresAt must be after issuedAt");
  }
  return {
    experimentId: payload.experimentId,
    username: payload.username,
    role: payload.role,
    peerPublicKey: payload.peerPublicKey,
    grant: payload.grant,
    issuedAt: payload.issuedAt,
    expiresAt: payload.expiresAt,
    token,
  };
}
