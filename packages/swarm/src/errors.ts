/**
 * Every failure the swarm engine reports carries one of these stable codes. Callers branch on
 * `code`, never on the message. Protocol rejections (bad pass, replay, bad signature …) keep their
 * `ProtocolError` from `@barnraise/protocol`; these codes cover what happens above it.
 */
export const SwarmErrorCode = {
  /** A message from a peer is not valid CBOR, does not match its schema, or breaks the protocol's rules. */
  MALFORMED_MESSAGE: "MALFORMED_MESSAGE",
  /** A frame or message is larger than the limit for its kind. */
  OVERSIZED_MESSAGE: "OVERSIZED_MESSAGE",
  /** The remote peer answered with an error; `remoteCode` holds its code. */
  REMOTE_ERROR: "REMOTE_ERROR",
  /** The peer is not authorized: it presented no valid pass for this experiment. */
  UNAUTHORIZED_PEER: "UNAUTHORIZED_PEER",
  /** A peer could not be reached, or its stream closed before the exchange finished. */
  PEER_UNREACHABLE: "PEER_UNREACHABLE",
  /** An operation did not finish in time. */
  TIMEOUT: "TIMEOUT",
  /** The operation was cancelled by its caller (shutdown, newer round …). */
  ABORTED: "ABORTED",
  /** Matchmaking ended without a group of at least two members. */
  NO_GROUP: "NO_GROUP",
  /** An all-reduce round failed for this peer (a reducer left, a part never arrived …). */
  ALLREDUCE_FAILED: "ALLREDUCE_FAILED",
  /**
   * A reducer excluded this peer from an all-reduce round for what it saw on this peer's stream
   * (non-finite values, a malformed chunk, a chunk too late); `remoteCode` holds its reason, `peer`
   * the reducer. The reducer is alive: the fault is this peer's, and the others' round goes on.
   */
  ALLREDUCE_REFUSED: "ALLREDUCE_REFUSED",
  /** Downloaded state does not hash to the donor's manifest, or no donor could serve it. */
  STATE_UNAVAILABLE: "STATE_UNAVAILABLE",
  /** A vector or buffer does not have the length that was agreed on. */
  LENGTH_MISMATCH: "LENGTH_MISMATCH",
  /** The linear program for load balancing could not be solved. */
  LOAD_BALANCING_FAILED: "LOAD_BALANCING_FAILED",
  /** The access pass could not be refreshed. */
  PASS_REFRESH_FAILED: "PASS_REFRESH_FAILED",
  /** The node is not started, or already stopped. */
  NOT_RUNNING: "NOT_RUNNING",
  /** The peer serves as many requests of this kind as it will at once; try again later. */
  BUSY: "BUSY",
} as const;

export type SwarmErrorCode = (typeof SwarmErrorCode)[keyof typeof SwarmErrorCode];

export interface SwarmErrorOptions {
  cause?: unknown;
  /** The code the remote peer sent: for REMOTE_ERROR its error code, for ALLREDUCE_REFUSED its reason. */
  remoteCode?: string;
  /** The peer the error is about, when there is one. */
  peer?: string;
}

export class SwarmError extends Error {
  override readonly name = "SwarmError";
  readonly code: SwarmErrorCode;
  readonly remoteCode: string | undefined;
  readonly peer: string | undefined;

  constructor(code: SwarmErrorCode, message: string, options: SwarmErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.remoteCode = options.remoteCode;
    this.peer = options.peer;
  }
}

export function isSwarmError(error: unknown, code?: SwarmErrorCode): error is SwarmError {
  return error instanceof SwarmError && (code === undefined || error.code === code);
}
