/**
 * What the experiment page and its contributing Web Worker say to each other ("Contribute from this
 * browser"). The page starts the worker and steers it (pause, use limit, leave); the worker runs the
 * volunteer's node and tells the page how it goes. Both sides are the platform's own code, served
 * from its own origin.
 */

import type { PauseReason } from "@barnraise/protocol";

/**
 * Why the page holds the tab's training: the volunteer's pause button, or the page hidden while
 * "pause when this tab is hidden" is on. My nodes says which.
 */
export type TabHold = Extract<PauseReason, "volunteer" | "hidden">;
export const TAB_HOLDS: readonly TabHold[] = ["volunteer", "hidden"];

/** The page's orders. */
export type PageMessage =
  | {
      readonly type: "start";
      /** The platform's origin: the worker joins with the page's session there. */
      readonly server: string;
      readonly experimentId: string;
      /** The signed-in user: each user of the browser has a key of their own per experiment. */
      readonly userId: string;
      /** Where the platform serves the wasm backend's binaries (a URL ending in "/"). */
      readonly wasmBase: string;
      /** What holds training from the start (none: it trains at once). */
      readonly held: readonly TabHold[];
      /** The share of the time the tab may compute, in [0.1, 1]. */
      readonly dutyCycle: number;
      /** When the volunteer clicked (ms since the epoch), for the time to the first sample. */
      readonly clickedAt: number;
    }
  /** What holds training now (none: train). */
  | { readonly type: "hold"; readonly reasons: readonly TabHold[] }
  | { readonly type: "duty-cycle"; readonly share: number }
  /** Finish the round in flight, then leave the swarm. */
  | { readonly type: "leave" };

/** The tab node's state, as the page shows it (a PeerStatus, structured-clone safe). */
export interface TabStatus {
  readonly phase: string;
  readonly step: number;
  readonly globalSamples: number;
  readonly targetBatchSize: number;
  readonly localSamplesPerSecond: number;
  readonly samplesContributed: number;
  readonly peersOnline: number;
  readonly loss: number | undefined;
  readonly network?: {
    readonly mode: string;
    readonly direct: number;
    readonly relayed: number;
    /** Of the direct ones, those over WebRTC (the others over WebSockets). */
    readonly webrtc: number;
  };
  readonly swarmNote?: string;
}

/**
 * One collaborative step the tab took part in, from its optimizer (the run's `VolunteerStep`, which
 * the worker posts as it is; the page's build does not compile the run's package).
 */
export interface TabStep {
  readonly step: number;
  readonly groupSize: number;
  /** Whether the tab's samples went into the swarm's model. */
  readonly shared: boolean;
  readonly localSamples: number;
  /** Bytes the tab sent in the step's all-reduce. */
  readonly bytesSent: number | undefined;
  /** The digest of the parameters after the step, the same in every member that took it. */
  readonly stateDigest: string;
}
/** The worker's news. */
export type WorkerMessage =
  | { readonly type: "status"; readonly status: TabStatus }
  | { readonly type: "log"; readonly level: "info" | "warn" | "error"; readonly message: string }
  | { readonly type: "joined"; readonly peerId: string }
  | { readonly type: "backend"; readonly description: string }
  | { readonly type: "first-sample"; readonly secondsSinceStart: number }
  | { readonly type: "step"; readonly step: TabStep }
  /** The node left: it was told to, the run ended, or something failed (`error`, said for a person). */
  | { readonly type: "ended"; readonly reason: "left" | "done" | "failed"; readonly error?: string };
