/**
 * Every rejection in the protocol carries one of these stable codes. Callers branch on `code`,
 * never on the message, and the platform maps codes to HTTP statuses in one place.
 */
export const ProtocolErrorCode = {
  /** Input is not a well-formed token, key, payload or field. */
  MALFORMED: "MALFORMED",
  /** Input is larger than the limit for its kind; it was rejected before parsing. */
  OVERSIZED: "OVERSIZED",
  /** The payload parses but is not in canonical JSON form. */
  NON_CANONICAL: "NON_CANONICAL",
  /** A key has the wrong length or does not match its pair. */
  INVALID_KEY: "INVALID_KEY",
  /** A PeerId does not carry an Ed25519 public key. */
  PEER_ID_NOT_ED25519: "PEER_ID_NOT_ED25519",

  /** The access pass is not signed by this experiment's authority. */
  PASS_BAD_SIGNATURE: "PASS_BAD_SIGNATURE",
  /** The access pass has expired. */
  PASS_EXPIRED: "PASS_EXPIRED",
  /** The access pass was issued in the future (beyond the allowed clock skew). */
  PASS_NOT_YET_VALID: "PASS_NOT_YET_VALID",
  /** The access pass belongs to another experiment. */
  PASS_WRONG_EXPERIMENT: "PASS_WRONG_EXPERIMENT",
  /** The access pass grants a role that the receiver does not accept here. */
  PASS_WRONG_ROLE: "PASS_WRONG_ROLE",
  /** The access pass's holder was banned, or the token it was issued on revoked, by the organizer (run control). */
  PASS_REVOKED: "PASS_REVOKED",
  /**
   * The access pass is signed by the experiment's previous authority key, and was issued after that
   * key was replaced or is shown after the grace period that followed: the holder must fetch a pass
   * of the new key.
   */
  PASS_KEY_ROTATED: "PASS_KEY_ROTATED",

  /** The signed request's signature does not match the key in its pass. */
  REQUEST_BAD_SIGNATURE: "REQUEST_BAD_SIGNATURE",
  /** The signed request is addressed to another recipient. */
  REQUEST_WRONG_RECIPIENT: "REQUEST_WRONG_RECIPIENT",
  /** The signed request's pass belongs to another key than the connection's authenticated peer. */
  REQUEST_WRONG_SENDER: "REQUEST_WRONG_SENDER",
  /** The signed request was made for another endpoint or protocol. */
  REQUEST_WRONG_SCOPE: "REQUEST_WRONG_SCOPE",
  /** The signed request's time is further from the receiver's clock than the allowed skew. */
  REQUEST_CLOCK_SKEW: "REQUEST_CLOCK_SKEW",
  /** The signed request's nonce was already seen inside the replay window. */
  REQUEST_REPLAYED: "REQUEST_REPLAYED",
  /** The replay store is full; the request is refused rather than risk a replay. */
  REPLAY_STORE_FULL: "REPLAY_STORE_FULL",

  /** The body does not hash to the digest that was signed. */
  BODY_MISMATCH: "BODY_MISMATCH",

  /** The signed response's signature does not match the key in the responder's pass. */
  RESPONSE_BAD_SIGNATURE: "RESPONSE_BAD_SIGNATURE",
  /** The signed response does not echo the request's nonce. */
  RESPONSE_NONCE_MISMATCH: "RESPONSE_NONCE_MISMATCH",
  /** The signed response comes from a peer other than the one that was asked. */
  RESPONSE_WRONG_RESPONDER: "RESPONSE_WRONG_RESPONDER",

  /** The signed config is not signed by this experiment's authority. */
  CONFIG_BAD_SIGNATURE: "CONFIG_BAD_SIGNATURE",
  /** The signed config belongs to another experiment. */
  CONFIG_WRONG_EXPERIMENT: "CONFIG_WRONG_EXPERIMENT",
  /** The experiment config does not satisfy the schema. */
  CONFIG_INVALID: "CONFIG_INVALID",

  /** The run control is not signed by this experiment's authority. */
  CONTROL_BAD_SIGNATURE: "CONTROL_BAD_SIGNATURE",
  /** The run control belongs to another experiment. */
  CONTROL_WRONG_EXPERIMENT: "CONTROL_WRONG_EXPERIMENT",

  /** The authority rotation certificate is not signed by the key it replaces. */
  ROTATION_BAD_SIGNATURE: "ROTATION_BAD_SIGNATURE",
  /** The authority rotation certificate belongs to another experiment. */
  ROTATION_WRONG_EXPERIMENT: "ROTATION_WRONG_EXPERIMENT",
  /** Rotation certificates contradict each other: one key replaced twice, or key versions going back. */
  ROTATION_CONFLICT: "ROTATION_CONFLICT",

  /** The checkpoint attestation is not signed by this experiment's authority. */
  CHECKPOINT_BAD_SIGNATURE: "CHECKPOINT_BAD_SIGNATURE",
  /** The checkpoint attestation belongs to another experiment. */
  CHECKPOINT_WRONG_EXPERIMENT: "CHECKPOINT_WRONG_EXPERIMENT",
  /** The checkpoint's bytes do not match what its attestation vouches for. */
  CHECKPOINT_MISMATCH: "CHECKPOINT_MISMATCH",
} as const;

export type ProtocolErrorCode = (typeof ProtocolErrorCode)[keyof typeof ProtocolErrorCode];

/**
 * An error class whose `instanceof` goes by brand, not by prototype: a bundler may load a module more
 * than once in one process (a Next server's instrumentation hook and its routes are separate bundles
 * that share objects), and an error made by one copy must still be recognized by code of the other.
 * Each subclass names its brand, a global symbol: `static override readonly brand = Symbol.for(…)`.
 */
export abstract class BrandedError extends Error {
  static readonly brand: symbol = Symbol.for("barnraise.BrandedError");

  static override [Symbol.hasInstance](value: unknown): boolean {
    return (
      typeof value === "object" && value !== null && (value as Record<symbol, unknown>)[this.brand] === true
    );
  }

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    // Every class of the chain, so that the instance is also one of its parents.
    for (let type: unknown = new.target; type !== Error; type = Object.getPrototypeOf(type)) {
      (this as unknown as Record<symbol, boolean>)[(type as typeof BrandedError).brand] = true;
    }
  }
}

export class ProtocolError extends BrandedError {
  static override readonly brand = Symbol.for("barnraise.ProtocolError");
  override readonly name = "ProtocolError";
  readonly code: ProtocolErrorCode;

  constructor(code: ProtocolErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}

export function isProtocolError(error: unknown, code?: ProtocolErrorCode): error is ProtocolError {
  return error instanceof ProtocolError && (code === undefined || error.code === code);
}
