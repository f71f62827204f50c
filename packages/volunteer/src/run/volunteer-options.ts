import type {
  AveragerPort,
  AveragingMode,
  JoinCredential,
  JoinedExperiment,
  NodeMetrics,
  NodeStore,
  SwarmTransports,
  TrafficCaps,
} from "@barnraise/swarm";
import type {
  BackendBenchmark,
  BackendChoice,
  BlobStore,
  Evaluation,
  SelectedBackend,
} from "@barnraise/models";
import type { TrainResult } from "../training/trainer.ts";
import type { VolunteerControls } from "../training/volunteer-controls.ts";
import type { Reporter } from "../status/peer-status.ts";

/**
 * What a volunteer's node needs of the program it runs in: Node.js's for the CLI peer (files, the
 * native and Dawn backends, Prometheus), a browser's for a tab (IndexedDB, WebGPU, WebGL and wasm,
 * WebSockets). Everything else of the run is the same code.
 */
export interface VolunteerRuntime {
  /** Where the node keeps its identity and authority pin. */
  readonly nodeStore: NodeStore;
  /** Verified files under `name`: "models" for uploaded models, a dataset's name for its shards. */
  readonly blobStore: (name: string) => BlobStore;
  /** Picks the TF.js backend for `choice`; returns it and its speed (the one "auto" measured, else a fresh benchmark). */
  readonly selectBackend: (
    choice: BackendChoice,
    signal: AbortSignal,
    log: (line: string) => void,
  ) => Promise<{ selected: SelectedBackend; benchmark: BackendBenchmark }>;
  /** Bytes the automatic batch size may fill with activations. */
  readonly activationMemoryBytes: () => number;
  /** The runtime's libp2p transports besides circuit relay; the swarm's default (TCP, WebSockets) when absent. */
  readonly transports?: SwarmTransports;
  /** Where the node records and serves its metrics; nowhere when absent. */
  readonly metrics?: NodeMetrics;
  /** The CPU time this process has used (ms), where the runtime tells it: the use limit then counts all of it. */
  readonly cpuTimeMs?: () => number;
}

export interface VolunteerOptions {
  readonly server: URL;
  /** The volunteer's peer token, or (in a browser tab) the signed-in session. */
  readonly credential: JoinCredential;
  readonly runtime: VolunteerRuntime;
  readonly backend: BackendChoice;
  /** Overrides the experiment's `training.localBatchSize`. */
  readonly batchSize?: number | "auto" | undefined;
  /** "node" accepts connections and reduces; "client" only dials out (behind NAT, a browser tab). */
  readonly mode: Extract<AveragingMode, "node" | "client">;
  /** Listen multiaddrs; the swarm's default when empty. */
  readonly listen: readonly string[];
  /** Multiaddrs of peers to join through, besides the platform's initial peers. */
  readonly peers: readonly string[];
  readonly reporter: Reporter;
  /** The volunteer's own pause and use limit (a tab's button, the CLI's rules for the machine). */
  readonly controls?: VolunteerControls;
  /** The volunteer's caps on the peer's upload and download; none by default. */
  readonly caps?: TrafficCaps;
  /** Graceful stop (first Ctrl-C, the tab's leave): finish the round in flight, then leave. */
  readonly stopSignal: AbortSignal;
  /** Hard stop (second Ctrl-C): abandon everything. */
  readonly abortSignal: AbortSignal;
  /** When the program started, for the time-to-first-sample figure; default: when runVolunteer is called. */
  readonly startedAt?: number;
  readonly now?: () => number;
  /**
   * For tests of the swarm's defences only (no program sets it): wraps the port through which
   * the optimizer averages, so a test's attacker peer can tamper with what it contributes (scale
   * or flip its gradients) while everything else runs as a volunteer's peer does.
   */
  readonly wrapAverager?: (port: AveragerPort) => AveragerPort;
}

export interface VolunteerResult {
  readonly experiment: JoinedExperiment["experiment"];
  readonly train: TrainResult;
  readonly evaluation?: Evaluation | undefined;
}
