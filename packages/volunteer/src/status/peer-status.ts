import type { Logger } from "pino";
import type { PauseReason } from "../training/volunteer-controls.ts";

/** What the peer is doing, for the status line. */
export type PeerPhase =
  "starting" | "joining" | "loading-state" | "training" | "averaging" | "paused" | "cut-off" | "stopping";

/**
 * A snapshot of the peer and its swarm (DESIGN §1: local samples/s, global progress to the next
 * collaborative step, peers online). The trainer emits one after every minibatch and phase change.
 */
export interface PeerStatus {
  readonly phase: PeerPhase;
  /** The collaborative step (epoch) this peer accumulates for. */
  readonly step: number;
  /** Samples the swarm has accumulated toward the next step, this peer's included. */
  readonly globalSamples: number;
  readonly targetBatchSize: number;
  /** Seconds until the swarm reaches the target; Infinity when nobody is training. */
  readonly etaSeconds: number;
  /** This peer's smoothed training throughput. */
  readonly localSamplesPerSecond: number;
  /** Samples this peer has put into collaborative steps (the swarm's model) since it started. */
  readonly samplesContributed: number;
  /** Peers with fresh progress, this one included. */
  readonly peersOnline: number;
  /** Mean loss of this peer's minibatches in the current step; undefined before the first. */
  readonly loss: number | undefined;
  /** This peer's mode and how many members it reaches by each path; absent where unknown. */
  readonly network?: PeerNetwork;
  /**
   * What keeps this peer from the swarm, when something does: "refused by the swarm: … — create a
   * new token …", or (phase "cut-off") why it holds training and what to do. Absent otherwise.
   */
  readonly swarmNote?: string;
  /** The volunteer's own rules that hold training now (phase "paused"); absent when none does. */
  readonly pauseReasons?: readonly PauseReason[];
}

/**
 * A node accepts connections and reduces a part; a client (behind NAT, or `--client`) reaches the
 * others through an aux peer's relay and only sends and receives. Members are counted by path:
 * direct, relayed, or upgraded from relayed to direct by hole punching.
 */
export interface PeerNetwork {
  readonly mode: "node" | "client" | "aux";
  readonly direct: number;
  readonly relayed: number;
  readonly upgraded: number;
  /** Of the members reached directly, those over WebRTC (a browser tab's path); absent when none. */
  readonly webrtc?: number;
}

export type LogLevel = "info" | "warn" | "error";

/**
 * The milestones of a volunteer's run, as data (each is also logged as a line): the platform admitted
 * the node, the backend was measured, the first minibatch went in, a collaborative step was taken.
 */
export type VolunteerEvent =
  | { readonly type: "joined"; readonly peerId: string; readonly experimentId: string }
  | { readonly type: "backend"; readonly description: string }
  | { readonly type: "first-sample"; readonly samples: number; readonly secondsSinceStart: number }
  | { readonly type: "step"; readonly step: VolunteerStep };

/** One collaborative step this node took, from its optimizer. */
export interface VolunteerStep {
  readonly step: number;
  readonly groupSize: number;
  /** Whether this node's samples went into the swarm's model (it averaged with another trainer). */
  readonly shared: boolean;
  readonly localSamples: number;
  /** Bytes this node sent in the step's all-reduce; undefined where it was not measured. */
  readonly bytesSent: number | undefined;
  /** The digest of the parameters after the step, the same in every member that took it. */
  readonly stateDigest: string;
}

/**
 * Where the peer tells the volunteer what happens: a live status line on a terminal, structured JSON
 * logs otherwise (DESIGN §1). `logger` is the pino logger handed to the swarm engine; its records
 * go to the same place.
 */
export interface Reporter {
  readonly logger: Logger;
  /** The run's milestones as data, for a program that shows them (the tab's page); optional. */
  event?(event: VolunteerEvent): void;
  /** Called often (every minibatch); implementations throttle their output. */
  status(status: PeerStatus): void;
  log(level: LogLevel, message: string, fields?: Readonly<Record<string, unknown>>): void;
  /** Flushes and releases the output (clears the status line); further calls are ignored. */
  close(): void;
}
