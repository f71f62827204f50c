import type { PeerRole } from "@barnraise/protocol";
import type { AllowlistStatus, ExperimentStatus } from "./experiment-access.ts";

/**
 * Whether a node counts toward its experiment right now and, if not, why. A pure function of the
 * node's row and its surroundings, so the "my nodes" page, the API and the tests agree on one rule.
 */

/** A node not seen for this long is stale. Aux monitors refresh `lastSeenAt` every collaborative step. */
export const STALE_AFTER_MS = 2 * 60 * 1000;

/** The reasons a node is not counted, in the order they are checked. */
export const PeerNotCountedReason = {
  experimentPaused: "experiment_paused",
  banned: "banned",
  notAllowlisted: "not_allowlisted",
  tokenRevoked: "token_revoked",
  passExpired: "pass_expired",
  stale: "stale",
  notAveraging: "not_averaging",
} as const;
export type PeerNotCountedReason = (typeof PeerNotCountedReason)[keyof typeof PeerNotCountedReason];

export interface PeerStatusInput {
  readonly experimentStatus: ExperimentStatus;
  readonly role: PeerRole;
  /** Whether the node's user organizes the experiment. */
  readonly isOrganizer: boolean;
  /** The node's user's allowlist entry in the experiment, or null without one. */
  readonly allowlistStatus: AllowlistStatus | null;
  readonly tokenRevokedAt: Date | null;
  readonly passExpiresAt: Date;
  readonly lastSeenAt: Date;
  /** Trainers: whether the aux last saw the node put samples into collaborative steps; null if unknown. */
  readonly averaging: boolean | null;
}

export type PeerStatus =
  { readonly counted: true } | { readonly counted: false; readonly reason: PeerNotCountedReason };

/** `now` is Unix time in milliseconds. */
export function peerStatus(input: PeerStatusInput, now: number): PeerStatus {
  const notCounted = (reason: PeerNotCountedReason): PeerStatus => ({ counted: false, reason });
  if (input.experimentStatus === "paused") return notCounted(PeerNotCountedReason.experimentPaused);
  if (!input.isOrganizer && input.allowlistStatus === "banned") {
    return notCounted(PeerNotCountedReason.banned);
  }
  if (input.role === "trainer" && !input.isOrganizer && input.allowlistStatus !== "approved") {
    return notCounted(PeerNotCountedReason.notAllowlisted);
  }
  if (input.tokenRevokedAt !== null) return notCounted(PeerNotCountedReason.tokenRevoked);
  if (input.passExpiresAt.getTime() <= now) return notCounted(PeerNotCountedReason.passExpired);
  if (now - input.lastSeenAt.getTime() > STALE_AFTER_MS) return notCounted(PeerNotCountedReason.stale);
  if (input.role === "trainer" && input.averaging === false) {
    return notCounted(PeerNotCountedReason.notAveraging);
  }
  return { counted: true };
}

const messages: Record<PeerNotCountedReason, string> = {
  experiment_paused: "The organizer has paused this experiment; the node waits until it is resumed.",
  banned: "You are banned from this experiment, so the node may not take part.",
  not_allowlisted:
    "You are not (or no longer) on this experiment's allowlist; ask the organizer to approve you.",
  token_revoked:
    "The token this node joined with was revoked; create a new token and restart the node with it.",
  pass_expired:
    "The node's access pass expired and was not renewed; the node is probably stopped or cannot reach the platform.",
  stale: "The node has not been seen for over 2 minutes; it may be stopped, offline or unreachable.",
  not_averaging:
    "The node is running, but none of its samples went into a collaborative step for a while: it trains alone or cannot reach the other volunteers. Its log says why (look for 'averaging failed' or 'no other trainer' lines).",
};

/** A sentence for people saying why a node is not counted. */
export function peerStatusMessage(reason: PeerNotCountedReason): string {
  return messages[reason];
}
