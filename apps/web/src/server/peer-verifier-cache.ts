import type { Database } from "@barnraise/prisma";
import { DatabaseNonceStore } from "@barnraise/prisma";
import {
  AccessPassVerifier,
  decodePublicKey,
  ReplayGuard,
  RequestVerifier,
  type CryptoProvider,
} from "@barnraise/protocol";

/** N of DeDLOC I.5: a signed request's time may be this far from the platform's clock; nonces are kept 2N. */
export const SIGNED_REQUEST_MAX_SKEW_MS = 30_000;

export interface AuthorityKeyRef {
  readonly id: string;
  readonly authorityPublicKey: string;
  readonly authorityKeyVersion: number;
}

/**
 * One RequestVerifier per (experiment, authority key version), kept for the life of the process, so
 * each pass's signature is checked once (the pass verifier remembers verified passes). Rotating an
 * experiment's key bumps its version: the next request builds a verifier for the new key, and passes
 * signed by the old key no longer verify. The replay guard is shared and keeps its nonces in the
 * database, so every web instance sees the same replay window.
 */
export class PeerVerifierCache {
  readonly replayGuard: ReplayGuard;
  readonly #crypto: CryptoProvider;
  readonly #verifiers = new Map<string, { version: number; publicKey: string; verifier: RequestVerifier }>();

  constructor(db: Database, crypto: CryptoProvider) {
    this.#crypto = crypto;
    this.replayGuard = new ReplayGuard({
      store: new DatabaseNonceStore(db),
      maxSkewMs: SIGNED_REQUEST_MAX_SKEW_MS,
    });
  }

  verifierFor(experiment: AuthorityKeyRef): RequestVerifier {
    const cached = this.#verifiers.get(experiment.id);
    if (
      cached !== undefined &&
      cached.version === experiment.authorityKeyVersion &&
      cached.publicKey === experiment.authorityPublicKey
    ) {
      return cached.verifier;
    }
    const authorityPublicKey = decodePublicKey(experiment.authorityPublicKey);
    const verifier = new RequestVerifier({
      crypto: this.#crypto,
      passes: new AccessPassVerifier({
        crypto: this.#crypto,
        authorityPublicKey,
        experimentId: experiment.id,
      }),
      recipientPublicKey: authorityPublicKey,
      replayGuard: this.replayGuard,
    });
    // One entry per experiment: a newer key version replaces the older one.
    this.#verifiers.set(experiment.id, {
      version: experiment.authorityKeyVersion,
      publicKey: experiment.authorityPublicKey,
      verifier,
    });
    return verifier;
  }
}
