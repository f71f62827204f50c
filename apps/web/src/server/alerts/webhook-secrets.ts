import { randomBytes } from "node:crypto";
import { toBase64Url } from "@barnraise/protocol";
import { openSealed, seal, type SealBinding } from "../sealing.ts";

/**
 * Webhook secrets: generated here (`whsec_` and 32 random bytes, base64url), shown to the organizer
 * once, and stored sealed like the authority keys (sealing.ts), bound to the webhook's id, so a
 * database dump alone cannot forge alerts.
 */

export class SealedWebhookSecretError extends Error {
  override readonly name = "SealedWebhookSecretError";
}

export function generateWebhookSecret(): string {
  return `whsec_${toBase64Url(new Uint8Array(randomBytes(32)))}`;
}

function binding(webhookId: string): SealBinding {
  return { purpose: "webhook-secret-seal v1", context: `barnraise webhook secret\0${webhookId}` };
}

export function sealWebhookSecret(plain: string, serverSecret: string, webhookId: string): string {
  return seal(new TextEncoder().encode(plain), serverSecret, binding(webhookId));
}

export function openWebhookSecret(
  sealed: string,
  serverSecrets: readonly string[],
  webhookId: string,
): string {
  const opened = openSealed(sealed, serverSecrets, binding(webhookId));
  if (opened === "malformed")
    throw new SealedWebhookSecretError("sealed webhook secret has an unknown format");
  if (opened === "not-opened") {
    throw new SealedWebhookSecretError(
      `the secret of webhook ${webhookId} does not open with BARNRAISE_SECRET (was it changed without listing the old one in BARNRAISE_PREVIOUS_SECRETS?)`,
    );
  }
  return new TextDecoder().decode(opened);
}
