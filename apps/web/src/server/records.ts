import type { PeerRole, VerifiedRequest } from "@barnraise/protocol";

/**
 * The records the use cases pass around: rows as the services read them and who is calling. They
 * import nothing of the server, so that the context's own parts (lookups, ingestion, verifiers) and
 * the use cases built on the context can both name them.
 */

/** An experiment row as stored (the columns the services read). */
export interface ExperimentRecord {
  readonly id: string;
  readonly name: string;
  readonly description: string;
  readonly organizerId: string;
  readonly config: string;
  readonly configVersion: number;
  readonly status: string;
  readonly authorityPublicKey: string;
  readonly authoritySecretKey: string;
  readonly authorityKeyVersion: number;
  /** Version of the run control; grows with every change to status, rollback or revocations. */
  readonly controlVersion: number;
  /** How many times the run was rolled back. */
  readonly generation: number;
  readonly rollbackCheckpointId: string | null;
  /** The metric curve in use. */
  readonly timeline: number;
  readonly swarmAlivePeers: number;
  readonly swarmSamplesPerSecond: number;
  readonly swarmSeenAt: Date | null;
  readonly idleSince: Date | null;
  /** Since when the aux has reported the swarm split, and its latest report (JSON); null while whole. */
  readonly splitSince: Date | null;
  readonly split: string | null;
  /** When the swarm.split alert last went out. */
  readonly splitAlertedAt: Date | null;
  /** Machines (keys with a live pass) one trainer token, and one volunteer, may run at once. */
  readonly maxNodesPerToken: number;
  readonly maxNodesPerUser: number;
  readonly createdAt: Date;
  readonly updatedAt: Date;
}

/** A signed-in user. */
export interface SessionUser {
  readonly id: string;
  readonly username: string;
}

export interface PeerCaller {
  readonly experiment: ExperimentRecord;
  readonly verified: VerifiedRequest;
  /** The caller's Peer row. */
  readonly peer: {
    readonly id: string;
    readonly peerId: string;
    readonly userId: string;
    readonly role: PeerRole;
  };
}

/** An aux peer of the experiment's organizer. */
export type AuxCaller = PeerCaller;
