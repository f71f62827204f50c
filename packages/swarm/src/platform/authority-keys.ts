import {
  AccessPassVerifier,
  DEFAULT_ROTATION_GRACE_MS,
  encodePublicKey,
  equalBytes,
  followAuthorityRotations,
  isProtocolError,
  MAX_ROTATION_CERTIFICATES,
  type AuthorityRotation,
} from "@barnraise/protocol";
import { runtimeCrypto } from "@barnraise/protocol/runtime-crypto";
import type { Logger } from "pino";
import type { AuthorityPinStore } from "./authority-pin.ts";
import type { JoinedExperiment } from "./join-response.ts";

/**
 * The experiment's authority as this node knows it: the current key, and the keys it replaced
 * while their grace period lasts (DEFAULT_ROTATION_GRACE_MS after each rotation, for passes they
 * signed before it). One mutable holder per node, which everything that checks the authority's
 * signature or addresses the authority reads at the time it does so: the swarm node's pass
 * verifier, the run control board, the platform client (the recipient of signed requests), the
 * checkpoint attestation check, the pass refresher (the key a join must show) and the authority pin.
 *
 * The key moves only along rotation certificates (protocol/authority-rotation.ts) that chain from
 * the key held, each signed by the key it replaces, which the node hears of from the platform: the
 * run control answer it asks for every 5 s and the join answer of each pass refresh. A list that
 * does not verify, or does not lead anywhere from the key held, changes nothing.
 */

export interface AuthorityKeysOptions {
  readonly experimentId: string;
  /** The key trusted now (from the verified join). */
  readonly publicKey: Uint8Array;
  /** The rotations that led to `publicKey`, oldest first: the keys they replaced keep their grace. */
  readonly rotations?: readonly AuthorityRotation[];
  /** How long a replaced key's passes (issued before the rotation) still count; default DEFAULT_ROTATION_GRACE_MS. */
  readonly graceMs?: number;
  /** The node's authority pin (`authority-pin.json`): rewritten on every rotation followed. */
  readonly pins?: AuthorityPinStore;
  readonly logger?: Pick<Logger, "info" | "warn">;
  readonly now?: () => number;
}

/** Told when the node follows a rotation: the newest one, and every one followed (oldest first). */
export type RotationListener = (latest: AuthorityRotation, chain: readonly AuthorityRotation[]) => void;

export class AuthorityKeys {
  readonly experimentId: string;
  readonly #graceMs: number;
  readonly #now: () => number;
  readonly #options: AuthorityKeysOptions;
  #publicKey: Uint8Array;
  /** The rotations that led to the current key, oldest first (at most MAX_ROTATION_CERTIFICATES). */
  #rotations: AuthorityRotation[];
  readonly #listeners = new Set<RotationListener>();
  /** The last list of certificates looked at, so an unchanged list is not verified again. */
  #lastList = "";
  #pinning: Promise<void> = Promise.resolve();

  constructor(options: AuthorityKeysOptions) {
    this.experimentId = options.experimentId;
    this.#options = options;
    this.#publicKey = options.publicKey;
    this.#rotations = [...(options.rotations ?? [])].slice(-MAX_ROTATION_CERTIFICATES);
    this.#graceMs = options.graceMs ?? DEFAULT_ROTATION_GRACE_MS;
    this.#now = options.now ?? Date.now;
  }

  /**
   * The holder for a node that just joined: the key the join returned, and the rotations that led
   * to it (so passes of the key before keep their grace here too). With `pins`, the node's pin
   * follows every rotation.
   */
  static fromJoin(
    joined: Pick<JoinedExperiment, "experiment" | "authorityPublicKey" | "authorityRotations">,
    options: Omit<AuthorityKeysOptions, "experimentId" | "publicKey" | "rotations"> = {},
  ): AuthorityKeys {
    return new AuthorityKeys({
      ...options,
      experimentId: joined.experiment.id,
      publicKey: joined.authorityPublicKey,
      rotations: joined.authorityRotations,
    });
  }

  /** The authority's current key: what its signatures are checked with first, and what requests are addressed to. */
  get publicKey(): Uint8Array {
    return this.#publicKey;
  }

  /** The current key's version, when a rotation to it is known. */
  get keyVersion(): number | undefined {
    return this.#rotations.at(-1)?.keyVersion;
  }

  /** How long a replaced key's passes still count after its rotation. */
  get graceMs(): number {
    return this.#graceMs;
  }

  /** The keys whose signatures count at `now`: the current one first, then replaced ones in their grace, newest first. */
  trustedKeys(now: number = this.#now()): [Uint8Array, ...Uint8Array[]] {
    const replaced = this.#rotations
      .filter((rotation) => now < rotation.rotatedAt + this.#graceMs)
      .map((rotation) => rotation.previousPublicKey)
      .reverse();
    return [this.#publicKey, ...replaced];
  }

  /** Calls `listener` on every rotation followed from now on; returns the unsubscribe function. */
  onRotation(listener: RotationListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /**
   * A pass verifier for this experiment that trusts what this holder trusts, now and after every
   * rotation it follows.
   */
  passVerifier(options: { maxSkewMs?: number; cacheSize?: number } = {}): AccessPassVerifier {
    const verifier = new AccessPassVerifier({
      crypto: runtimeCrypto,
      authorityPublicKey: this.#publicKey,
      experimentId: this.experimentId,
      ...options,
    });
    const trust = (rotations: readonly AuthorityRotation[]) => {
      for (const rotation of rotations) verifier.trustRotation({ ...rotation, graceMs: this.#graceMs });
    };
    trust(this.#rotations);
    this.onRotation((_latest, chain) => {
      trust(chain);
    });
    return verifier;
  }

  /**
   * Follows the certificates the platform listed (`source` says where: "control", "join") from the
   * key held: when they lead to a newer key, that key becomes current, listeners are told, the pin
   * is rewritten, and the newest rotation is returned. A list that does not verify is logged and
   * changes nothing (null), as does one that leads nowhere from the key held.
   */
  follow(certificates: readonly string[], source = "platform"): AuthorityRotation | null {
    if (certificates.length === 0) return null;
    const list = certificates.join("\n");
    if (list === this.#lastList) return null;
    this.#lastList = list;
    let followed: ReturnType<typeof followAuthorityRotations>;
    try {
      followed = followAuthorityRotations(runtimeCrypto, {
        from: this.#publicKey,
        experimentId: this.experimentId,
        certificates,
      });
    } catch (error) {
      this.#options.logger?.warn(
        { source, code: isProtocolError(error) ? error.code : undefined, err: error },
        "refused the authority rotation certificates the platform listed: they do not verify; keeping the authority key",
      );
      return null;
    }
    const latest = followed.latest;
    if (latest === null || equalBytes(latest.publicKey, this.#publicKey)) return null;
    this.#publicKey = latest.publicKey;
    this.#rotations = [...this.#rotations, ...followed.chain].slice(-MAX_ROTATION_CERTIFICATES);
    this.#options.logger?.info(
      {
        source,
        keyVersion: latest.keyVersion,
        rotatedAt: new Date(latest.rotatedAt).toISOString(),
        authorityPublicKey: encodePublicKey(latest.publicKey),
      },
      `the organizer rotated the experiment's authority key (now version ${latest.keyVersion}); following it: the old key signed the new one`,
    );
    this.#repin();
    for (const listener of this.#listeners) {
      try {
        listener(latest, followed.chain);
      } catch (error) {
        this.#options.logger?.warn({ err: error }, "an authority rotation listener threw");
      }
    }
    return latest;
  }

  /** Follows the rotations a verified join answer showed (see `follow`). */
  followJoin(joined: Pick<JoinedExperiment, "authorityRotations">): AuthorityRotation | null {
    return this.follow(
      joined.authorityRotations.map((rotation) => rotation.token),
      "join",
    );
  }

  /** Resolves once the pin holds the current key (after the writes queued so far). */
  async pinned(): Promise<void> {
    await this.#pinning;
  }

  #repin(): void {
    const pins = this.#options.pins;
    if (pins === undefined) return;
    const pin = { experimentId: this.experimentId, authorityPublicKey: this.#publicKey };
    this.#pinning = this.#pinning
      .then(() => pins.save(pin))
      .catch((error: unknown) => {
        this.#options.logger?.warn(
          { err: error, pin: pins.location },
          "could not record the new authority key in the pin file; the next start follows the rotation again",
        );
      });
  }
}
