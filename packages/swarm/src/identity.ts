import type { KeyPair } from "@barnraise/protocol";
import type { AuthorityPinStore } from "./platform/authority-pin.ts";

/**
 * A node's Ed25519 identity. The same key signs the node's access-pass requests and is its libp2p
 * identity, so a node that keeps it keeps its PeerId across restarts.
 */
export interface Identity {
  readonly keyPair: KeyPair;
  readonly peerId: string;
  /** True when there was none and a new identity was stored. */
  readonly created: boolean;
}

/**
 * Where a node keeps what outlives one run of its program: its identity and the experiment's
 * authority key it pinned on its first join. The Node programs keep both in files
 * (`fileNodeStore` in `@barnraise/swarm/node`); a browser tab would keep them in IndexedDB.
 */
export interface NodeStore {
  /** Where the identity is, as messages name it (a file path). */
  readonly location: string;
  /** Loads the identity, or creates and stores one if there is none. */
  loadOrCreateIdentity(): Promise<Identity>;
  readonly pins: AuthorityPinStore;
}
