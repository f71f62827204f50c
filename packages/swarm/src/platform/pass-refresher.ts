import type { AuthorityKeys } from "./authority-keys.ts";
import { joinPlatform, type JoinOptions } from "./join-client.ts";
import type { JoinError } from "./join-error.ts";
import { isPermanentRefusal } from "./join-experiment.ts";
import type { JoinedExperiment } from "./join-response.ts";

/**
 * The `refresh` that `PassHolder` calls before the pass expires: join again with the same credential
 * and key and return the new pass token. It is bound to the experiment of the first join and to the
 * authority the node trusts now (`authority`, read at each refresh), so a refresh can never move the
 * node to another experiment or to an authority key it cannot follow (AUTHORITY_CHANGED). A join
 * that returns a rotated key with certificates chaining from the key held is taken, and the holder
 * follows the rotation before the new pass is handed over. PassHolder retries failures with its own
 * backoff, so this tries once.
 */
export interface PassRefresherOptions extends Omit<JoinOptions, "pinnedAuthority" | "experimentId"> {
  /** The experiment's authority as this node knows it; every refresh must show its key or follow from it. */
  authority: AuthorityKeys;
  /** Told of every successful refresh, e.g. to notice a new config version. */
  onJoined?: (joined: JoinedExperiment) => void;
  /**
   * Told when the platform refuses the refresh for good (banned, removed from the allowlist, token
   * revoked …): the node should leave the swarm rather than wait for its pass to run out.
   */
  onRefused?: (error: JoinError) => void;
  /** The single attempt; `joinPlatform` unless injected. */
  join?: (options: JoinOptions) => Promise<JoinedExperiment>;
}

/** A `() => Promise<string>` for `PassHolder`'s `refresh`. Rejects with JoinError. */
export function createPassRefresher(options: PassRefresherOptions): () => Promise<string> {
  const { authority, onJoined, onRefused, join = joinPlatform, ...joinOptions } = options;
  return async () => {
    let refreshed: JoinedExperiment;
    try {
      refreshed = await join({
        ...joinOptions,
        experimentId: authority.experimentId,
        pinnedAuthority: authority.publicKey,
      });
    } catch (error) {
      if (isPermanentRefusal(error)) onRefused?.(error);
      throw error;
    }
    authority.followJoin(refreshed);
    onJoined?.(refreshed);
    return refreshed.passToken;
  };
}
