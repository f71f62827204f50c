import { joinPlatform, type JoinOptions } from "./join-client.ts";
import type { JoinError } from "./join-error.ts";
import { isPermanentRefusal } from "./join-experiment.ts";
import type { JoinedExperiment } from "./join-response.ts";

/**
 * The `refresh` that `PassHolder` calls before the pass expires: join again with the same token and
 * key and return the new pass token. It is bound to the experiment and authority key of the first
 * join, so a refresh can never move the node to another experiment or another authority
 * (AUTHORITY_CHANGED). PassHolder retries failures with its own backoff, so this tries once.
 */
export interface PassRefresherOptions extends Omit<JoinOptions, "pinnedAuthority" | "experimentId"> {
  /** The first verified join; its experiment id and authority key are required of every refresh. */
  joined: Pick<JoinedExperiment, "experiment" | "authorityPublicKey">;
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
  const { joined, onJoined, onRefused, join = joinPlatform, ...joinOptions } = options;
  return async () => {
    let refreshed: JoinedExperiment;
    try {
      refreshed = await join({
        ...joinOptions,
        experimentId: joined.experiment.id,
        pinnedAuthority: joined.authorityPublicKey,
      });
    } catch (error) {
      if (isPermanentRefusal(error)) onRefused?.(error);
      throw error;
    }
    onJoined?.(refreshed);
    return refreshed.passToken;
  };
}
