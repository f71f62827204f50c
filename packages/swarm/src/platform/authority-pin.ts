/**
 * Trust on first use for the experiment's authority key, the way SSH pins host keys: the first
 * verified join records the experiment id and authority key beside the node's identity, and every
 * later join (restart or pass refresh) must name the same experiment and key, so a server or network
 * path that starts handing out another key cannot take over a running node. One pin per identity:
 * a node (one key, one PeerId) belongs to one experiment.
 */
export interface AuthorityPin {
  readonly experimentId: string;
  readonly authorityPublicKey: Uint8Array;
}

/** Where a node keeps its pin (a file beside its identity file, for the Node programs). */
export interface AuthorityPinStore {
  /** Where the pin is, as messages name it. */
  readonly location: string;
  /** The pin; undefined when there is none (first join). Throws on a pin it cannot read. */
  load(): Promise<AuthorityPin | undefined>;
  /** Records `pin`, replacing any earlier one. */
  save(pin: AuthorityPin): Promise<void>;
}
