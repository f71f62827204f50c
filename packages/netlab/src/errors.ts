/**
 * Every failure netlab reports carries one of these stable codes, so a test or benchmark can tell
 * "this machine cannot run namespaces" apart from "a command failed half-way".
 */
export const NetLabErrorCode = {
  /** The machine cannot run the lab: not root, no `ip`/`tc`, or namespaces cannot be created. */
  UNAVAILABLE: "UNAVAILABLE",
  /** The kernel lacks a feature an option needs (for example the netem qdisc for `delayMs`). */
  UNSUPPORTED: "UNSUPPORTED",
  /** A name, rate or other option is not valid; the message says which and why. */
  INVALID_ARGUMENT: "INVALID_ARGUMENT",
  /** An `ip`/`tc` command (or a command run in a host) exited with an error. */
  COMMAND_FAILED: "COMMAND_FAILED",
  /** The lab was already destroyed. */
  DESTROYED: "DESTROYED",
  /** `destroy()` or `cleanupStale()` could not remove everything; the message lists what is left. */
  CLEANUP_FAILED: "CLEANUP_FAILED",
} as const;

export type NetLabErrorCode = (typeof NetLabErrorCode)[keyof typeof NetLabErrorCode];

/** The one error class of netlab; branch on `code`, read `message` for the details. */
export class NetLabError extends Error {
  override readonly name = "NetLabError";
  readonly code: NetLabErrorCode;

  constructor(code: NetLabErrorCode, message: string, options: { cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
  }
}
