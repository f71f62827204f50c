import {
  AccessPassVerifier,
  canonicalJson,
  fromBase64Url,
  generateKeyPair,
  issueAccessPass,
  MemoryNonceStore,
  ReplayGuard,
  RequestVerifier,
  toBase64Url,
  type CryptoProvider,
  type KeyPair,
  type PeerRole,
} from "../src/index.ts";

export const EXPERIMENT = "exp-1";
export const NOW = Date.UTC(2026, 10, 21, 12, 0, 0);
export const HOUR = 3_600_000;
export const SKEW_MS = 30_000;
export const SCOPE = "POST /api/v1/experiments/exp-1/metrics";

/** An experiment authority, two peers and the receiver's verifiers, as a test world. */
export function makeWorld(crypto: CryptoProvider) {
  const authority = generateKeyPair();
  const alice = generateKeyPair();
  const bob = generateKeyPair();
  const passes = new AccessPassVerifier({
    crypto,
    authorityPublicKey: authority.publicKey,
    experimentId: EXPERIMENT,
    maxSkewMs: SKEW_MS,
  });
  const store = new MemoryNonceStore();
  const replayGuard = new ReplayGuard({ store, maxSkewMs: SKEW_MS });
  const bobVerifier = new RequestVerifier({ crypto, passes, recipientPublicKey: bob.publicKey, replayGuard });

  function pass(
    holder: KeyPair,
    overrides: Partial<{
      experimentId: string;
      username: string;
      role: PeerRole;
      grant: string;
      issuedAt: number;
      expiresAt: number;
    }> = {},
    signer: KeyPair = authority,
  ): string {
    return issueAccessPass(crypto, signer, {
      experimentId: EXPERIMENT,
      username: holder === alice ? "alice" : "bob",
      role: "trainer",
      peerPublicKey: holder.publicKey,
      grant: holder === alice ? "token-alice" : "token-bob",
      issuedAt: NOW - HOUR,
      expiresAt: NOW + HOUR,
      ...overrides,
    });
  }

  return { crypto, authority, alice, bob, passes, store, replayGuard, bobVerifier, pass };
}

/** Rewrites a field of a token's payload and keeps the old signature: a tampered token. */
export function tamperPayload(token: string, edit: (payload: Record<string, unknown>) => void): string {
  const [payloadPart = "", signaturePart = ""] = token.split(".");
  const payload = JSON.parse(new TextDecoder().decode(fromBase64Url(payloadPart, "payload"))) as Record<
    string,
    unknown
  >;
  edit(payload);
  return `${toBase64Url(canonicalJson(payload))}.${signaturePart}`;
}

export const bytes = (text: string): Uint8Array => new TextEncoder().encode(text);
