import { equalBytes, type KeyPair } from "@barnraise/protocol";
import type { AuthorityPinStore } from "./authority-pin.ts";
import type { JoinCredential } from "./join-client.ts";
import { JoinError, JoinErrorCode } from "./join-error.ts";
import type { JoinedExperiment } from "./join-response.ts";
import { abortableSleep, joinWithRetry, type JoinRetryOptions } from "./join-retry.ts";

/** How long a node waits before asking a paused experiment again. */
export const PAUSED_RETRY_MS = 30_000;

export interface JoinExperimentOptions {
  readonly server: URL;
  readonly credential: JoinCredential;
  readonly keyPair: KeyPair;
  /** Where the node keeps its authority pin (a file beside its identity file). */
  readonly pins: AuthorityPinStore;
  readonly signal?: AbortSignal;
  /** Told before each wait while the platform is unreachable or busy. */
  readonly onRetry?: JoinRetryOptions["onRetry"];
  /** Told when the experiment is paused, before waiting `retryMs` to ask again. */
  readonly onPaused?: (error: JoinError, retryMs: number) => void;
  /** Told when the credential is for another experiment than the pinned one, whose key is pinned instead. */
  readonly onRepinned?: (previousExperimentId: string, experimentId: string) => void;
  /** Default PAUSED_RETRY_MS. */
  readonly pausedRetryMs?: number;
}

/**
 * What a peer or aux does to get into an experiment: join (retrying while the platform is
 * unreachable, and asking again while the experiment is paused), then check the authority key
 * against the one pinned for the experiment.
 *
 * The key is pinned per experiment on first use: a later join of the same experiment under another
 * key is taken only when the join's rotation certificates lead from the pinned key to it (the
 * organizer rotated the key while this node was away; the pin moves to the new key). Otherwise the
 * platform (or someone in between) is not the one trusted before, and the join fails with
 * AUTHORITY_CHANGED. A token of another experiment moves the pin to that experiment (one identity,
 * one experiment at a time); first use of an experiment is trusted as TLS to the platform is.
 */
export async function joinExperiment(options: JoinExperimentOptions): Promise<JoinedExperiment> {
  const { signal } = options;
  const pausedRetryMs = options.pausedRetryMs ?? PAUSED_RETRY_MS;
  let joined: JoinedExperiment;
  for (;;) {
    try {
      joined = await joinWithRetry({
        server: options.server,
        credential: options.credential,
        keyPair: options.keyPair,
        ...(signal === undefined ? {} : { signal }),
        ...(options.onRetry === undefined ? {} : { onRetry: options.onRetry }),
      });
      break;
    } catch (error) {
      if (!(error instanceof JoinError) || error.code !== JoinErrorCode.EXPERIMENT_PAUSED) throw error;
      options.onPaused?.(error, pausedRetryMs);
      try {
        await abortableSleep(pausedRetryMs, signal);
      } catch (cause) {
        throw new JoinError(JoinErrorCode.ABORTED, "the join was cancelled", { cause });
      }
    }
  }
  const { pins } = options;
  const pin = await pins.load();
  if (pin?.experimentId === joined.experiment.id) {
    if (!equalBytes(pin.authorityPublicKey, joined.authorityPublicKey)) {
      // Rotated while this node was away: the certificates lead from the pinned key to the new one.
      const followed = joined.authorityRotations.some((rotation) =>
        equalBytes(rotation.previousPublicKey, pin.authorityPublicKey),
      );
      if (!followed) {
        throw new JoinError(
          JoinErrorCode.AUTHORITY_CHANGED,
          `the experiment's authority key differs from the one pinned in ${pins.location}, and no rotation ` +
            "certificate signed by the pinned key leads to it; if the organizer announced a new key, " +
            "delete that pin to trust it",
        );
      }
      await pins.save({
        experimentId: joined.experiment.id,
        authorityPublicKey: joined.authorityPublicKey,
      });
    }
  } else {
    if (pin !== undefined) options.onRepinned?.(pin.experimentId, joined.experiment.id);
    await pins.save({
      experimentId: joined.experiment.id,
      authorityPublicKey: joined.authorityPublicKey,
    });
  }
  return joined;
}

/** Refusals that a pass refresh cannot outlive: the node must leave the swarm. */
export function isPermanentRefusal(error: unknown): error is JoinError {
  if (!(error instanceof JoinError)) return false;
  const permanent: readonly JoinErrorCode[] = [
    JoinErrorCode.TOKEN_INVALID,
    JoinErrorCode.TOKEN_REVOKED,
    JoinErrorCode.NOT_ALLOWLISTED,
    JoinErrorCode.BANNED,
    JoinErrorCode.KEY_CONFLICT,
    JoinErrorCode.TOO_MANY_NODES,
    JoinErrorCode.NODE_RETIRED,
    JoinErrorCode.CONFIG_TAMPERED,
    JoinErrorCode.PASS_INVALID,
    JoinErrorCode.AUTHORITY_CHANGED,
    JoinErrorCode.SIGNED_OUT,
  ];
  return permanent.includes(error.code);
}
