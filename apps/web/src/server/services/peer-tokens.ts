import { createHash, randomBytes } from "node:crypto";

/**
 * Peer tokens: the secret a volunteer (role trainer) or organizer (role aux) gives a node so it can
 * join. `brp_` + 32 random bytes in base64url. The platform keeps only the SHA-256 (tokens carry 256
 * bits of entropy, so a fast hash is enough) and a short prefix to tell tokens apart in lists.
 */

export const PEER_TOKEN_PREFIX = "brp_";
export const PEER_TOKEN_PATTERN = /^brp_[A-Za-z0-9_-]{43}$/;
const DISPLAY_PREFIX_LENGTH = PEER_TOKEN_PREFIX.length + 6;

export interface NewPeerToken {
  /** Shown to the user once, never stored. */
  readonly token: string;
  readonly tokenHash: string;
  readonly prefix: string;
}

export function generatePeerToken(): NewPeerToken {
  const token = PEER_TOKEN_PREFIX + randomBytes(32).toString("base64url");
  return { token, tokenHash: hashPeerToken(token), prefix: token.slice(0, DISPLAY_PREFIX_LENGTH) };
}

export function hashPeerToken(token: string): string {
  return createHash("sha256").update(token, "utf8").digest("base64url");
}

export function isWellFormedPeerToken(token: string): boolean {
  return PEER_TOKEN_PATTERN.test(token);
}
