/**
 * Every failure of the data pipeline carries one of these stable codes, so the training loop can
 * tell a flaky server (retry later) from a corrupt or incompatible dataset (stop and say so).
 */
export const DatasetErrorCode = {
  /** The platform has no such dataset (not prepared yet, or a wrong name). */
  NOT_FOUND: "NOT_FOUND",
  /** The server answered with an unexpected HTTP status that retrying will not fix. */
  HTTP_ERROR: "HTTP_ERROR",
  /** The server stayed unreachable or kept failing after every retry. */
  DOWNLOAD_FAILED: "DOWNLOAD_FAILED",
  /** The manifest is not JSON, does not satisfy the schema, or contradicts itself. */
  MANIFEST_INVALID: "MANIFEST_INVALID",
  /** The manifest has a format version this peer does not understand. */
  FORMAT_UNSUPPORTED: "FORMAT_UNSUPPORTED",
  /** A downloaded shard's size or SHA-256 differs from the manifest (tampered or truncated). */
  SHARD_CORRUPT: "SHARD_CORRUPT",
  /** A shard's bytes do not follow its record layout. */
  SHARD_MALFORMED: "SHARD_MALFORMED",
  /** The dataset does not fit the model: wrong format, vocabulary too large, or no records. */
  INCOMPATIBLE: "INCOMPATIBLE",
} as const;
export type DatasetErrorCode = (typeof DatasetErrorCode)[keyof typeof DatasetErrorCode];

/** A data-pipeline failure: branch on `code`, show `message` to the volunteer. */
export class DatasetError extends Error {
  override readonly name = "DatasetError";
  readonly code: DatasetErrorCode;

  constructor(code: DatasetErrorCode, message: string, options: { cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
  }
}

/** True when `error` is a DatasetError (with `code`, when given). */
export function isDatasetError(error: unknown, code?: DatasetErrorCode): error is DatasetError {
  return error instanceof DatasetError && (code === undefined || error.code === code);
}
