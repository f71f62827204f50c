import { hkdfSync, randomBytes } from "node:crypto";
import { xchacha20poly1305 } from "@noble/ciphers/chacha.js";
import { fromBase64Url, toBase64Url } from "@barnraise/protocol";

/**
 * Secrets the platform keeps in its database sealed (experiments' authority keys, webhook secrets):
 * XChaCha20-Poly1305 under a key derived (HKDF-SHA256) from BARNRAISE_SECRET for one `purpose`, with
 * `context` (what the secret belongs to) bound as associated data, so a sealed value copied to
 * another row does not open. Former secrets (BARNRAISE_PREVIOUS_SECRETS) still open old seals, which
 * lets an operator rotate the server secret.
 *
 * Format: `v1.<24-byte nonce>.<ciphertext+tag>`, both base64url.
 */

export interface SealBinding {
  /** The HKDF info of the key, e.g. "authority-key-seal v1". */
  readonly purpose: string;
  /** Bound as associated data, e.g. the experiment id and key version. */
  readonly context: string;
}

function sealingKey(secret: string, purpose: string): Uint8Array {
  return new Uint8Array(hkdfSync("sha256", secret, "barnraise", purpose, 32));
}

export function seal(plain: Uint8Array, secret: string, binding: SealBinding): string {
  const nonce = new Uint8Array(randomBytes(24));
  const box = xchacha20poly1305(
    sealingKey(secret, binding.purpose),
    nonce,
    new TextEncoder().encode(binding.context),
  ).encrypt(plain);
  return `v1.${toBase64Url(nonce)}.${toBase64Url(box)}`;
}

/**
 * The sealed bytes, opened with the first of `secrets` that opens them; "malformed" when `sealed` is
 * not in the format, "not-opened" when none of the secrets opens it (or it was changed).
 */
export function openSealed(
  sealed: string,
  secrets: readonly string[],
  binding: SealBinding,
): Uint8Array | "malformed" | "not-opened" {
  const [version, nonceText, boxText] = sealed.split(".");
  if (version !== "v1" || nonceText === undefined || boxText === undefined) return "malformed";
  let nonce: Uint8Array;
  let box: Uint8Array;
  try {
    nonce = fromBase64Url(nonceText, "sealed nonce");
    box = fromBase64Url(boxText, "sealed value");
  } catch {
    return "malformed";
  }
  const context = new TextEncoder().encode(binding.context);
  for (const secret of secrets) {
    try {
      return xchacha20poly1305(sealingKey(secret, binding.purpose), nonce, context).decrypt(box);
    } catch {
      // try the next secret
    }
  }
  return "not-opened";
}
