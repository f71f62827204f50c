import { LRUCache } from "lru-cache";
import { z } from "zod";
import type { CryptoProvider } from "./crypto-provider.ts";
import { isUsablePublicKey, PUBLIC_KEY_BYTES } from "./crypto-provider.ts";
import { ProtocolError, ProtocolErrorCode } from "./errors.ts";
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

/**
 * Verifies access passes for one experiment. A pass's signature is checked once and remembered
 * (it is immutable); time, experiment and role are checked on every call.
 */
export class AccessPassVerifier {
  readonly #crypto: CryptoProvider;
  readonly #authorityPublicKey: Uint8Array;
  readonly #experimentId: string;
  readonly #maxSkewMs: number;
  readonly #verified: LRUCache<string, AccessPass>;
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
    const pass = typeof token === "string" ? this.#verified.get(token) : undefined;
    const verified = pass ?? this.#verifySignature(token);
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

  #verifySignature(token: unknown): AccessPass {
    const opened = openToken(token, passPayloadSchema, MAX_PASS_TOKEN_LENGTH, "access pass");
    if (!verifyTokenSignature(this.#crypto, SignatureDomain.pass, opened, this.#authorityPublicKey)) {
      throw new ProtocolError(
        ProtocolErrorCode.PASS_BAD_SIGNATURE,
        "access pass is not signed by this experiment's authority",
      );
    }
    const pass = toAccessPass(opened.payload, token as string);
    this.#verified.set(pass.token, pass);
    return pass;
  }
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
