import type { Database } from "@barnraise/prisma";
import { DatabaseNonceStore } from "@barnraise/prisma";
import {
  AccessPassVerifier,
  decodePublicKey,
  ReplayGuard,
  RequestVerifier,
  type CryptoProvider,
} from "@barnraise/protocol";
import { readRecentRotations } from "./services/read-authority-rotations.ts";

/** N of DeDLOC I.5: a signed request's time may be this far from the platform's clock; nonces are kept 2N. */
export const SIGNED_REQUEST_MAX_SKEW_MS = 30_000;

export interface AuthorityKeyRef {
  readonly id: string;
  readonly authorityPublicKey: string;
  readonly authorityKeyVersion: number;
}

interface CachedVerifier {
  readonly version: number;
  readonly publicKey: string;
  readonly verifier: Promise<RequestVerifier>;
}

/**
 * One RequestVerifier per (experiment, authority key version), kept for the life of the process, so
 * each pass's signature is checked once (the pass verifier remembers verified passes). Rotating an
 * experiment's key bumps its version: the next request builds a verifier for the new key that also
 * takes, for the grace period after the rotation (DEFAULT_ROTATION_GRACE_MS), passes of the previous
 * key issued before it and requests addressed to the previous key, so running nodes keep working
 * until they have followed the rotation (within seconds: they read the run control every 5 s).
 * After the grace only the new key counts. The replay guard is shared and keeps its nonces in the
 * database, so every web instance sees the same replay window.
 */
export class PeerVerifierCache {
  readonly replayGuard: ReplayGuard;
  readonly #db: Database;
  readonly #crypto: CryptoProvider;
  readonly #now: () => number;
  readonly #verifiers = new Map<string, CachedVerifier>();

  constructor(db: Database, crypto: CryptoProvider, now: () => number = Date.now) {
    this.#db = db;
    this.#crypto = crypto;
    this.#now = now;
    this.replayGuard = new ReplayGuard({
      store: new DatabaseNonceStore(db),
      maxSkewMs: SIGNED_REQUEST_MAX_SKEW_MS,
    });
  }

  async verifierFor(experiment: AuthorityKeyRef): Promise<RequestVerifier> {
    const cached = this.#verifiers.get(experiment.id);
    if (
      cached !== undefined &&
      cached.version === experiment.authorityKeyVersion &&
      cached.publicKey === experiment.authorityPublicKey
    ) {
      return cached.verifier;
    }
    const verifier = this.#build(experiment);
    // One entry per experiment: a newer key version replaces the older one.
    const entry = {
      version: experiment.authorityKeyVersion,
      publicKey: experiment.authorityPublicKey,
      verifier,
    };
    this.#verifiers.set(experiment.id, entry);
    verifier.catch(() => {
      if (this.#verifiers.get(experiment.id) === entry) this.#verifiers.delete(experiment.id);
    });
    return verifier;
  }

  async #build(experiment: AuthorityKeyRef): Promise<RequestVerifier> {
    const passes = new AccessPassVerifier({
      crypto: this.#crypto,
      authorityPublicKey: decodePublicKey(experiment.authorityPublicKey),
      experimentId: experiment.id,
    });
    const rotations = await readRecentRotations(this.#db, experiment, this.#now());
    const formerRecipients = rotations.map((rotation) => {
      const previousPublicKey = decodePublicKey(rotation.previousPublicKey);
      passes.trustRotation({
        publicKey: decodePublicKey(rotation.publicKey),
        previousPublicKey,
        rotatedAt: rotation.rotatedAt,
        graceMs: rotation.graceMs,
      });
      return { publicKey: previousPublicKey, until: rotation.rotatedAt + rotation.graceMs };
    });
    return new RequestVerifier({
      crypto: this.#crypto,
      passes,
      recipientPublicKey: passes.authorityPublicKey,
      formerRecipients,
      replayGuard: this.replayGuard,
    });
  }
}
