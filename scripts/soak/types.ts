/**
 * What the soak observes, as plain data: the processes it ran, what their logs said, and the chaos
 * it caused. The checks (checks.ts) and the restart figures (restart-figures.ts) are pure functions
 * of these, so a unit test builds them by hand.
 */

export type Role = "platform" | "aux" | "peer";

/** Why the soak ended a process (or what end it expected); absent when the process ended by itself. */
export interface StopIntent {
  readonly reason: string;
  /** Unix ms when the soak signalled it or started to expect the end. */
  readonly at: number;
  /** Exit codes that count as the expected end; absent: any exit (a SIGKILL, a platform restart). */
  readonly expectCodes?: readonly number[];
}

/** One run of one process, from its spawn to its exit. */
export interface IncarnationView {
  /** "platform", "aux", "peer-2". */
  readonly name: string;
  readonly role: Role;
  /** 0 for the first start, then 1, 2, … */
  readonly index: number;
  readonly logFile: string;
  readonly startedAt: number;
  readonly endedAt: number | null;
  readonly exit: { readonly code: number | null; readonly signal: string | null } | null;
  readonly stop: StopIntent | null;
  /** Set when the soak had to SIGKILL a process that did not end as asked or expected. */
  readonly forced: string | null;
}

/** The line a peer logs after every collaborative step (msg "step N"). */
export interface StepLine {
  readonly time: number;
  readonly step: number;
  readonly groupSize: number;
  /** The group's total samples in the step. */
  readonly samples: number;
  /** This peer's samples in the step. */
  readonly localSamples: number;
  /** False for a step taken with no other trainer while others train (its samples do not count). */
  readonly shared: boolean;
  /** 16 hex digits: the fingerprint of the parameters after the step. */
  readonly stateDigest: string;
}

/** A peer's periodic status record (msg "status"). */
export interface StatusLine {
  readonly time: number;
  readonly phase: string;
  readonly step: number | null;
  /** What keeps the peer from the swarm ("refused by the swarm: …"), null when nothing does. */
  readonly swarmNote: string | null;
}

/** One peer incarnation and the lines it logged. */
export interface PeerHistory {
  readonly incarnation: IncarnationView;
  /** The node's PeerId, from its first records; null if it logged none. */
  readonly peerId: string | null;
  readonly steps: readonly StepLine[];
  readonly statuses: readonly StatusLine[];
  /**
   * When it loaded the swarm's state ("loaded the swarm's state at step N"): the state a donor
   * holds, which replaces what its own last step made (a private step dropped, a failed round).
   */
  readonly stateLoads?: readonly StateLoadLine[];
}

/** A peer's "loaded the swarm's state at step N" record. */
export interface StateLoadLine {
  readonly time: number;
  readonly step: number;
}

/** One aux incarnation and when it posted a step to the platform ("metrics posted"). */
export interface AuxHistory {
  readonly incarnation: IncarnationView;
  readonly posts: readonly number[];
}

/** The aux dropped a peer from the swarm because the token it joined with was revoked. */
export interface RevokedDrop {
  readonly time: number;
  readonly peerId: string;
}

/** An error-level line of the platform's output. */
export interface ErrorLine {
  /** Unix ms: the record's own time, or when the soak read a line that has none. */
  readonly time: number;
  /** The pino level (50 error, 60 fatal); 50 for an error Next.js printed as text. */
  readonly level: number;
  readonly text: string;
  readonly file: string;
}

export type ChaosKind = "peer-kill" | "peer-interrupt" | "retoken" | "aux-restart" | "platform-restart";

/** One chaos action as it happened. */
export interface ChaosRecord {
  readonly kind: ChaosKind;
  /** "peer-2" for a peer restart, null when the action is not about one process. */
  readonly target: string | null;
  readonly startedAt: number;
  /** When the restarted process (or the last of the restarted peers) was started again; null if never. */
  readonly restartedAt: number | null;
  readonly doneAt: number;
  /** The incarnations the action started, as "peer-2#3" or "aux#1". */
  readonly started: readonly string[];
  readonly notes: readonly string[];
  /** Why the action could not be completed, or null. */
  readonly failure: string | null;
}

/** The outcome of one check, as the report prints it. */
export interface CheckResult {
  readonly name: string;
  readonly pass: boolean;
  /** The numbers, on one line. */
  readonly summary: string;
  /** Every problem, and what else a reader needs to judge it. */
  readonly details: readonly string[];
}

/** "peer-2#3": one peer incarnation's name. */
export function incarnationId(incarnation: Pick<IncarnationView, "name" | "index">): string {
  return `${incarnation.name}#${incarnation.index}`;
}
