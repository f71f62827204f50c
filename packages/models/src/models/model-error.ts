/**
 * Every failure a model reports carries one of these stable codes, so the training loop can tell a
 * bad minibatch (skip it, report the data bug) from a misuse of the model (a programming error), and
 * the CLI can tell an uploaded model that failed verification from one it could not download.
 * A parameter vector of the wrong length is the swarm's `SwarmError` LENGTH_MISMATCH, raised by
 * `ParameterLayout.check`, because the same vector crosses into the engine.
 */
export const ModelErrorCode = {
  /** The batch is for the other preset (an image batch handed to the masked LM, or the reverse). */
  WRONG_BATCH_KIND: "WRONG_BATCH_KIND",
  /** The batch's arrays have the wrong type or length, or hold out-of-range ids, labels or mask values. */
  MALFORMED_BATCH: "MALFORMED_BATCH",
  /** A seed is not a safe integer. */
  INVALID_SEED: "INVALID_SEED",
  /** The model config cannot be built (e.g. hiddenSize not divisible by numHeads). */
  INVALID_CONFIG: "INVALID_CONFIG",
  /** An op was used in a way the model code's gradient rules do not cover (a bug in the preset). */
  UNSUPPORTED_OPERATION: "UNSUPPORTED_OPERATION",
  /** The model was used after `dispose()`. */
  DISPOSED: "DISPOSED",
  /**
   * An uploaded model's files differ from the SHA-256 the signed config names (altered on the
   * platform, a proxy or the way): the peer refuses to train them.
   */
  MODEL_TAMPERED: "MODEL_TAMPERED",
  /** An uploaded model could not be downloaded: not on the platform, or unreachable after every retry. */
  MODEL_UNAVAILABLE: "MODEL_UNAVAILABLE",
  /** An uploaded model's files are the signed ones, but they do not make a model this peer can train. */
  MODEL_INVALID: "MODEL_INVALID",
} as const;

export type ModelErrorCode = (typeof ModelErrorCode)[keyof typeof ModelErrorCode];

/** A model refused its input or could not be loaded; `code` says why, the message says what to fix. */
export class ModelError extends Error {
  override readonly name = "ModelError";
  readonly code: ModelErrorCode;

  constructor(code: ModelErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}

/** True when `error` is a ModelError (with `code`, when given). */
export function isModelError(error: unknown, code?: ModelErrorCode): error is ModelError {
  return error instanceof ModelError && (code === undefined || error.code === code);
}

/** Throws INVALID_SEED unless `seed` is a safe integer; `what` names it in the message. */
export function checkSeed(seed: number, what: string): void {
  if (!Number.isSafeInteger(seed)) {
    throw new ModelError(ModelErrorCode.INVALID_SEED, `${what} must be a safe integer, got ${seed}`);
  }
}
