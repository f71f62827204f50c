import { PAUSE_REASON_TEXT, PAUSE_REASONS, type PauseReason, type PeerRole } from "@barnraise/protocol";
import type { ExperimentStatus } from "../../api/schemas/experiments.ts";
import type { AllowlistStatus } from "../../api/schemas/allowlist.ts";
import { PeerNotCountedReason } from "../../api/schemas/nodes.ts";

/**
 * Whether a node counts toward its experiment right now and, if not, why. A pure function of the
 * node's row and its surroundings, so the "my nodes" page, the API and the tests agree on one rule.
 */

/** A node not seen for this long is stale. Aux monitors refresh `lastSeenAt` every collaborative step. */
export const STALE_AFTER_MS = 2 * 60 * 1000;
/**
 * A trainer counts only while an aux peer has reported it among the members the swarm accepts
 * within this long (the aux's heartbeat lists them every few seconds).
 */
export const SWARM_SEEN_WITHIN_MS = STALE_AFTER_MS;

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
  /** When an aux last reported the node among the members the swarm accepts; null if never. */
  readonly swarmSeenAt: Date | null;
  /** The swarm's latest refusal of the node's pass, as an aux reported it; null if none. */
  readonly swarmRefusal: SwarmRefusal | null;
  /** When its owner retired the machine; null or absent while it is not. */
  readonly retiredAt?: Date | null;
  /** Trainers: why its volunteer's rules hold it, as the swarm last reported; empty or absent while it trains. */
  readonly pauseReasons?: readonly PauseReason[];
}

/** The swarm refused a node's pass: when, its code (PASS_REVOKED …) and the refusing peer's reason. */
export interface SwarmRefusal {
  readonly at: Date;
  readonly code: string;
  readonly reason: string;
}

/** The swarm's view of a node from its Peer row's columns, as `PeerStatusInput` takes it. */
export function swarmViewOf(row: {
  readonly swarmSeenAt: Date | null;
  readonly swarmRefusedAt: Date | null;
  readonly swarmRefusalCode: string | null;
  readonly swarmRefusal: string | null;
  readonly pauseReasons: string | null;
}): Pick<PeerStatusInput, "swarmSeenAt" | "swarmRefusal"> & {
  readonly pauseReasons: readonly PauseReason[];
} {
  return {
    swarmSeenAt: row.swarmSeenAt,
    pauseReasons: parsePauseReasons(row.pauseReasons),
    swarmRefusal:
      row.swarmRefusedAt === null
        ? null
        : { at: row.swarmRefusedAt, code: row.swarmRefusalCode ?? "", reason: row.swarmRefusal ?? "" },
  };
}

/** The reasons of a Peer row's `pauseReasons` column (comma-separated); unknown ones are left out. */
export function parsePauseReasons(column: string | null): PauseReason[] {
  if (column === null) return [];
  const known = new Set<string>(PAUSE_REASONS);
  return column.split(",").filter((reason): reason is PauseReason => known.has(reason));
}

export type PeerStatus =
  { readonly counted: true } | { readonly counted: false; readonly reason: PeerNotCountedReason };

/**
 * `now` is Unix time in milliseconds. What the platform knows decides first (pause, ban, allowlist,
 * token, pass, liveness); then what the swarm did with the node, as its aux peers reported it: a
 * trainer counts only when the swarm has accepted it lately (a refusal since then says why not) and
 * its samples go into collaborative steps; a trainer its volunteer's rules hold (the machine is in
 * use, on battery …) is paused, and keeps the credit of what it did. Aux nodes are the swarm's own and count while they run.
 */
export function peerStatus(input: PeerStatusInput, now: number): PeerStatus {
  const notCounted = (reason: PeerNotCountedReason): PeerStatus => ({ counted: false, reason });
  if (input.retiredAt != null) return notCounted(PeerNotCountedReason.retired);
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
  if (input.role === "aux") return { counted: true };
  const seenAt = input.swarmSeenAt?.getTime();
  const refusal = input.swarmRefusal;
  if (
    refusal !== null &&
    now - refusal.at.getTime() <= STALE_AFTER_MS &&
    (seenAt === undefined || refusal.at.getTime() > seenAt)
  ) {
    return notCounted(PeerNotCountedReason.refusedBySwarm);
  }
  if (seenAt === undefined || now - seenAt > SWARM_SEEN_WITHIN_MS) {
    return notCounted(PeerNotCountedReason.notInSwarm);
  }
  if ((input.pauseReasons ?? []).length > 0) return notCounted(PeerNotCountedReason.paused);
  if (input.averaging === null) return notCounted(PeerNotCountedReason.joining);
  if (!input.averaging) return notCounted(PeerNotCountedReason.notAveraging);
  return { counted: true };
}

const messages: Record<PeerNotCountedReason, string> = {
  retired:
    "You retired this machine: its key may not join again, and it no longer takes one of your token's places. To run it again, give it a new identity.",
  experiment_paused: "The organizer has paused this experiment; the node waits until it is resumed.",
  banned: "You are banned from this experiment, so the node may not take part.",
  not_allowlisted:
    "You are not (or no longer) on this experiment's allowlist; ask the organizer to approve you.",
  token_revoked:
    "The token this node joined with was revoked; create a new token and restart the node with it.",
  pass_expired:
    "The node's access pass expired and was not renewed; the node is probably stopped or cannot reach the platform.",
  stale: "The node has not been seen for over 2 minutes; it may be stopped, offline or unreachable.",
  refused_by_swarm:
    "The swarm refuses this node's pass, so it trains a model of its own that nobody uses. Restart the node; if it is refused again, create a new token and restart it with that.",
  paused:
    "Paused by your rules for this machine: it stays in the swarm and trains again on its own when they allow; what it contributed keeps its credit.",
  not_in_swarm:
    "The platform let the node in, but the swarm has not heard from it in the last 2 minutes: it is still starting, or it cannot reach the aux peer. Its status line says what it waits for.",
  joining:
    "The swarm has accepted the node; it counts once its samples go into a collaborative step (usually within a minute).",
  not_averaging:
    "The node is running, but none of its samples went into a collaborative step for a while: it trains alone or cannot reach the other volunteers. Its log says why (look for 'averaging failed' or 'no other trainer' lines).",
};

/**
 * A sentence for people saying why a node is not counted. For a refusal by the swarm, `refusal`
 * (the aux's report) makes it say what was refused and what to do about it; for a pause,
 * `pauseReasons` say which of the volunteer's rules hold it ("Paused: machine in use. …").
 */
export function peerStatusMessage(
  reason: PeerNotCountedReason,
  refusal?: SwarmRefusal | null,
  pauseReasons: readonly PauseReason[] = [],
): string {
  if (reason === PeerNotCountedReason.paused && pauseReasons.length > 0) {
    return `Paused: ${pauseReasons.map((held) => PAUSE_REASON_TEXT[held]).join(", ")}. It stays in the swarm and trains again on its own when your rules for this machine allow; what it contributed keeps its credit.`;
  }
  if (reason !== PeerNotCountedReason.refusedBySwarm || refusal === null || refusal === undefined) {
    return messages[reason];
  }
  return `The swarm refuses this node's pass: ${refusal.reason}. ${refusalAdvice(refusal.code, refusal.reason)}`;
}

/** What the node's owner can do about a refusal of its pass, by the refusal's code. */
function refusalAdvice(code: string, reason: string): string {
  switch (code) {
    case "PASS_REVOKED":
      return /banned or removed/.test(reason)
        ? "You are banned or no longer on the allowlist: the node may not take part."
        : "Create a new token and restart the node with it.";
    case "PASS_EXPIRED":
      return "The node could not renew its pass: check that it reaches the platform, then restart it.";
    case "PASS_NOT_YET_VALID":
    case "REQUEST_CLOCK_SKEW":
      return "Check that the node's clock is right.";
    case "PASS_BAD_SIGNATURE":
      return "The organizer may have changed the experiment's key: restart the node.";
    default:
      return "Restart the node; if it is refused again, create a new token and restart it with that.";
  }
}
