import type { Logger } from "pino";

export interface AuxRunOptions {
  readonly server: URL;
  readonly token: string;
  readonly identityPath: string;
  /** Staging for checkpoint files; the held-out evaluation's dataset shards and uploaded model. */
  readonly dataDir: string;
  /** Listen multiaddrs; a fixed port keeps the address stable across restarts. */
  readonly listen: readonly string[];
  /** Addresses to register and announce instead of the listen addresses (public IP, DNS name). */
  readonly announce: readonly string[];
  /** Other aux peers or trainers to connect to at start. */
  readonly peers: readonly string[];
  /** Join averaging rounds as a reducer (weight 0). */
  readonly helpAveraging: boolean;
  /** Score each uploaded checkpoint on the dataset's test split and record the score with the platform. */
  readonly evaluate: boolean;
  /**
   * Validate the contributions to the rounds this aux helps average (needs `helpAveraging`): score
   * each sampled one by the change of held-out loss it causes and flag peers whose contributions
   * hurt, with the platform.
   */
  readonly validate: boolean;
  readonly logger: Logger;
  /** Stops the aux: it leaves the swarm and returns. */
  readonly stopSignal: AbortSignal;
  /** Serve Prometheus metrics at http://host:port/metrics (`--metrics-port`, `--metrics-host`). */
  readonly metrics?: { readonly port: number; readonly host: string };
}
