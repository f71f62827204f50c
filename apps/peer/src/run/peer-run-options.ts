import type { AveragerPort, AveragingMode, JoinCredential, JoinedExperiment } from "@barnraise/swarm";
import type { BackendChoice, Evaluation } from "@barnraise/models";
import type { TrainResult } from "../training/trainer.ts";
import type { Reporter } from "../ui/peer-status.ts";

export interface PeerRunOptions {
  readonly server: URL;
  /** The volunteer's peer token, or (in a browser tab) the signed-in session. */
  readonly credential: JoinCredential;
  readonly identityPath: string;
  /** Verified shards are cached here, per dataset, and uploaded models under `models/`. */
  readonly dataDir: string;
  readonly backend: BackendChoice;
  /** Overrides the experiment's `training.localBatchSize`. */
  readonly batchSize?: number | "auto" | undefined;
  /** "node" accepts connections and reduces; "client" only dials out (behind NAT). */
  readonly mode: Extract<AveragingMode, "node" | "client">;
  /** Listen multiaddrs; the swarm's default when empty. */
  readonly listen: readonly string[];
  /** Multiaddrs of peers to join through, besides the platform's initial peers. */
  readonly peers: readonly string[];
  readonly reporter: Reporter;
  /** Graceful stop (first Ctrl-C): finish the round in flight, then leave. */
  readonly stopSignal: AbortSignal;
  /** Hard stop (second Ctrl-C): abandon everything. */
  readonly abortSignal: AbortSignal;
  /** Process start, for the time-to-first-sample figure; default: when runPeer is called. */
  readonly startedAt?: number;
  /** Serve Prometheus metrics at http://host:port/metrics (`--metrics-port`, `--metrics-host`). */
  readonly metrics?: { readonly port: number; readonly host: string };
  readonly now?: () => number;
  /**
   * For tests of the swarm's defences only (the CLI never sets it): wraps the port through which
   * the optimizer averages, so a test's attacker peer can tamper with what it contributes (scale
   * or flip its gradients) while everything else runs as a volunteer's peer does.
   */
  readonly wrapAverager?: (port: AveragerPort) => AveragerPort;
}

export interface PeerRunResult {
  readonly experiment: JoinedExperiment["experiment"];
  readonly train: TrainResult;
  readonly evaluation?: Evaluation | undefined;
}
