import { z } from "zod";
import { MAX_PASS_TOKEN_LENGTH, type AccessPass, type AccessPassVerifier } from "./access-pass.ts";
import { bodyDigest, checkBodyDigest, type Body } from "./body-digest.ts";
import type { CryptoProvider } from "./crypto-provider.ts";
import { SHA256_BYTES } from "./crypto-provider.ts";
import { equalBytes, toBase64Url } from "./encoding.ts";
import { ProtocolError, ProtocolErrorCode } from "./errors.ts";
import { base64UrlField, NONCE_BYTES } from "./fields.ts";
import type { KeyPair } from "./keys.ts";
import { openToken, sealToken, SignatureDomain, verifyTokenSignature } from "./signed-message.ts";

export const MAX_RESPONSE_TOKEN_LENGTH = 4096;

const responsePayloadSchema = z.strictObject({
  v: z.literal(1),
  pass: z.string().max(MAX_PASS_TOKEN_LENGTH),
  nonce: base64UrlField(NONCE_BYTES),
  bodySha256: base64UrlField(SHA256_BYTES),
});

export interface SignResponseInit {
  /** The responder's access pass token. */
  pass: string;
  /** The nonce of the request being answered. */
  requestNonce: Uint8Array;
  body: Body;
}

/** DeDLOC I.5 signed response: the responder's pass, the request's nonce and the body hash. */
export function signResponse(crypto: CryptoProvider, responder: KeyPair, init: SignResponseInit): string {
  const payload = {
    v: 1,
    pass: init.pass,
    nonce: toBase64Url(init.requestNonce),
    bodySha256: toBase64Url(bodyDigest(crypto, init.body)),
  } satisfies z.input<typeof responsePayloadSchema>;
  responsePayloadSchema.parse(payload);
  return sealToken(crypto, SignatureDomain.response, payload, responder.secretKey);
}

export interface ResponseCheck {
  /** The public key of the peer the request was sent to. */
  responderPublicKey: Uint8Array;
  /** The nonce of the request that was sent. */
  requestNonce: Uint8Array;
  body: Body;
  now?: number;
}

/** Checks a signed response on the caller's side: pass, responder, signature, nonce echo, body. */
export function verifyResponse(
  crypto: CryptoProvider,
  passes: AccessPassVerifier,
  token: unknown,
  check: ResponseCheck,
): AccessPass {
  const opened = openToken(token, responsePayloadSchema, MAX_RESPONSE_TOKEN_LENGTH, "signed response");
  const pass = passes.verify(opened.payload.pass, { now: check.now ?? Date.now() });
  if (!equalBytes(pass.peerPublicKey, check.responderPublicKey)) {
    throw new ProtocolError(
      ProtocolErrorCode.RESPONSE_WRONG_RESPONDER,
      "response carries the pass of another peer than the one asked",
    );
  }
  if (!verifyTokenSignature(crypto, SignatureDomain.response, opened, pass.peerPublicKey)) {
    throw new ProtocolError(
      ProtocolErrorCode.RESPONSE_BAD_SIGNATURE,
      "response signature does not match its pass",
    );
  }
  if (!equalBytes(opened.payload.nonce, check.requestNonce)) {
    throw new ProtocolError(
      ProtocolErrorCode.RESPONSE_NONCE_MISMATCH,
      "response does not echo the request's nonce",
    );
  }
  checkBodyDigest(opened.payload.bodySha256, bodyDigest(crypto, check.body));
  return pass;
}
