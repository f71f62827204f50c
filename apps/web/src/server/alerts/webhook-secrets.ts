import { hkdfSync, randomBytes } from "node:crypto";
import { xchacha20poly1305 } from "@noble/ciphers/chacha.js";
import { fromBase64Url, toBase64Url } from "@barnraise/protocol";

/**
 * Webhook secrets: generated here (`whsec_` and 32 random bytes, base64url), shown to the organizer
 * once, and stored sealed like the authority keys: XChaCha20-Poly1305 under a key derived (HKDF-SHA256)
 * from BARNRAISE_SECRET, bound to the webhook's id, so a database dump alone cannot forge alerts.
 * Former secrets (BARNRAISE_PREVIOUS_SECRETS) still open old seals.
 */

export class SealedWebhookSecretError extends Error {
  override readonly name = "SealedWebhookSecretError";
}

export function generateWebhookSecret(): string {
  return `whsec_${toBase64Url(new Uint8Array(randomBytes(32)))}`;
}

function sealingKey(secret: string): Uint8Array {
  return new Uint8Array(hkdfSync("sha256", secret, "barnraise", "webhook-secret-seal v1", 32));
}

function associatedData(webhookId: string): Uint8Array {
  return new TextEncoder().encode(`barnraise webhook secret\0${webhookId}`);
}

export function sealWebhookSecret(plain: string, serverSecret: string, webhookId: string): string {
  const nonce = new Uint8Array(randomBytes(24));
  const box = xchacha20poly1305(sealingKey(serverSecret), nonce, associatedData(webhookId)).encrypt(
    new TextEncoder().encode(plain),
  );
  return `v1.${toBase64Url(nonce)}.${toBase64Url(box)}`;
}

export function openWebhookSecret(
  sealed: string,
  serverSecrets: readonly string[],
  webhookId: string,
): string {
  const [version, nonceText, boxText] = sealed.split(".");
  if (version !== "v1" || nonceText === undefined || boxText === undefined) {
    throw new SealedWebhookSecretError("sealed webhook secret has an unknown format");
  }
  const nonce = fromBase64Url(nonceText, "sealed secret nonce");
  const box = fromBase64Url(boxText, "sealed secret");
  for (const secret of serverSecrets) {
    try {
      const plain = xchacha20poly1305(sealingKey(secret), nonce, associatedData(webhookId)).decrypt(box);
      return new TextDecoder().decode(plain);
    } catch {
      // try the next secret
    }
  }
  throw new SealedWebhookSecretError(
    `the secret of webhook ${webhookId} does not open with BARNRAISE_SECRET (was it changed without listing the old one in BARNRAISE_PREVIOUS_SECRETS?)`,
  );
}
