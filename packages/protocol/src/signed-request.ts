import { z } from "zod";
import {
  MAX_PASS_TOKEN_LENGTH,
  type AccessPass,
  type AccessPassVerifier,
  type PeerRole,
} from "./access-pass.ts";
import { bodyDigest, checkBodyDigest, type Body } from "./body-digest.ts";
import type { CryptoProvider } from "./crypto-provider.ts";
import { PUBLIC_KEY_BYTES, SHA256_BYTES } from "./crypto-provider.ts";
import { equalBytes, toBase64Url } from "./encoding.ts";
import { ProtocolError, ProtocolErrorCode } from "./errors.ts";
import { base64UrlField, NONCE_BYTES, scopeSchema, timestampSchema } from "./fields.ts";
import { encodePublicKey, type KeyPair } from "./keys.ts";
import type { ReplayGuard } from "./replay-guard.ts";
import { openToken, sealToken, SignatureDomain, verifyTokenSignature } from "./signed-message.ts";

export const MAX_REQUEST_TOKEN_LENGTH = 4096;

const requestPayloadSchema = z.strictObject({
  v: z.literal(1),
  pass: z.string().max(MAX_PASS_TOKEN_LENGTH),
  recipient: base64UrlField(PUBLIC_KEY_BYTES),
  scope: scopeSchema,
  time: timestampSchema,
  nonce: base64UrlField(NONCE_BYTES),
  bodySha256: base64UrlField(SHA256_BYTES),
});

export interface SignRequestInit {
  /** The caller's access pass token. */
  pass: string;
  recipientPublicKey: Uint8Array;
  scope: string;
  body: Body;
  /** Unix time in milliseconds. */
  time: number;
  /** 16 random bytes; generated when omitted. */
  nonce?: Uint8Array;
}

/** DeDLOC I.5 signed request: the caller's pass, recipient, time, nonce and body hash, signed by the caller. */
export function signRequest(crypto: CryptoProvider, caller: KeyPair, init: SignRequestInit): string {
  const nonce = init.nonce ?? globalThis.crypto.getRandomValues(new Uint8Array(NONCE_BYTES));
  if (nonce.length !== NONCE_BYTES) throw new RangeError(`nonce must be ${NONCE_BYTES} bytes`);
  const payload = {
    v: 1,
    pass: init.pass,
    recipient: encodePublicKey(init.recipientPublicKey),
    scope: init.scope,
    time: init.time,
    nonce: toBase64Url(nonce),
    bodySha256: toBase64Url(bodyDigest(crypto, init.body)),
  } satisfies z.input<typeof requestPayloadSchema>;
  requestPayloadSchema.parse(payload);
  return sealToken(crypto, SignatureDomain.request, payload, caller.secretKey);
}

/**
 * The pass token a signed request carries, read without checking anything, or undefined when the
 * token does not parse. For telling refusals apart (whose pass it was), never for authorization.
 */
export function signedRequestPassUnverified(token: string): string | undefined {
  try {
    return openToken(token, requestPayloadSchema, MAX_REQUEST_TOKEN_LENGTH, "signed request").payload.pass;
  } catch {
    return undefined;
  }
}

export interface VerifiedRequest {
  readonly pass: AccessPass;
  readonly scope: string;
  readonly time: number;
  readonly nonce: Uint8Array;
  readonly bodySha256: Uint8Array;
}

export interface RequestCheck {
  /** The scope the receiver serves; a request signed for any other scope is refused. */
  scope: string;
  /**
   * The body received, or its digest. Pass "verify-later" only when the body is a stream that is
   * checked with `checkBodyDigest(verified.bodySha256, digest)` before anything is kept.
   */
  body: Body | "verify-later";
  now?: number;
  roles?: readonly PeerRole[];
  /** The authenticated remote key of the connection, when there is one (libp2p); it must own the pass. */
  sender?: Uint8Array;
}

export interface RequestVerifierOptions {
  crypto: CryptoProvider;
  passes: AccessPassVerifier;
  /** The receiver's own public key: requests addressed to anyone else are refused. */
  recipientPublicKey: Uint8Array;
  /**
   * Keys the receiver held before `recipientPublicKey` (the platform's authority keys before a
   * rotation): requests addressed to one are still taken until its `until` (Unix ms), so callers
   * that have not heard of the rotation yet are not refused meanwhile.
   */
  formerRecipients?: ReadonlyArray<{ readonly publicKey: Uint8Array; readonly until: number }>;
  replayGuard: ReplayGuard;
}

/** Verifies signed requests addressed to one recipient, with every check of DeDLOC I.5. */
export class RequestVerifier {
  readonly #crypto: CryptoProvider;
  readonly #passes: AccessPassVerifier;
  readonly #recipient: Uint8Array;
  readonly #formerRecipients: NonNullable<RequestVerifierOptions["formerRecipients"]>;
  readonly #replayGuard: ReplayGuard;

  constructor(options: RequestVerifierOptions) {
    this.#crypto = options.crypto;
    this.#passes = options.passes;
    this.#recipient = options.recipientPublicKey;
    this.#formerRecipients = options.formerRecipients ?? [];
    this.#replayGuard = options.replayGuard;
  }

  async verify(token: unknown, check: RequestCheck): Promise<VerifiedRequest> {
    const now = check.now ?? Date.now();
    const opened = openToken(token, requestPayloadSchema, MAX_REQUEST_TOKEN_LENGTH, "signed request");
    const { payload } = opened;
    // Cheap checks first, so junk costs no signature verification.
    if (!this.#addressedToUs(payload.recipient, now)) {
      throw new ProtocolError(
        ProtocolErrorCode.REQUEST_WRONG_RECIPIENT,
        "request is addressed to another recipient",
      );
    }
    if (payload.scope !== check.scope) {
      throw new ProtocolError(
        ProtocolErrorCode.REQUEST_WRONG_SCOPE,
        `request was signed for "${payload.scope}", not "${check.scope}"`,
      );
    }
    this.#replayGuard.checkTime(payload.time, now);
    const pass = this.#passes.verify(payload.pass, { now, ...(check.roles ? { roles: check.roles } : {}) });
    if (check.sender !== undefined && !equalBytes(check.sender, pass.peerPublicKey)) {
      throw new ProtocolError(
        ProtocolErrorCode.REQUEST_WRONG_SENDER,
        "pass belongs to another peer than the sender",
      );
    }
    if (!verifyTokenSignature(this.#crypto, SignatureDomain.request, opened, pass.peerPublicKey)) {
      throw new ProtocolError(
        ProtocolErrorCode.REQUEST_BAD_SIGNATURE,
        "request signature does not match its pass",
      );
    }
    if (check.body !== "verify-later") {
      checkBodyDigest(payload.bodySha256, bodyDigest(this.#crypto, check.body));
    }
    // Only authenticated requests reach the nonce store, so strangers cannot fill it.
    await this.#replayGuard.record(toBase64Url(pass.peerPublicKey), toBase64Url(payload.nonce), now);
    return {
      pass,
      scope: payload.scope,
      time: payload.time,
      nonce: payload.nonce,
      bodySha256: payload.bodySha256,
    };
  }

  #addressedToUs(recipient: Uint8Array, now: number): boolean {
    if (equalBytes(recipient, this.#recipient)) return true;
    return this.#formerRecipients.some(
      (former) => now < former.until && equalBytes(recipient, former.publicKey),
    );
  }
}
