/**
 * The API's error codes, part of its contract: every error body carries one (`errors.ts`), and each
 * code has one HTTP status. The platform's use cases throw `AppError` (server/app-error.ts) with them;
 * clients branch on `code`, never on the message.
 */
export const AppErrorCode = {
  /** The request needs a signed-in user. */
  UNAUTHENTICATED: "UNAUTHENTICATED",
  /** The signed-in user may not do this. */
  FORBIDDEN: "FORBIDDEN",
  NOT_FOUND: "NOT_FOUND",
  /** The body, query or path failed validation; `issues` says where. */
  INVALID_INPUT: "INVALID_INPUT",
  /** The request conflicts with the current state (e.g. the id is taken). */
  CONFLICT: "CONFLICT",
  PAYLOAD_TOO_LARGE: "PAYLOAD_TOO_LARGE",
  UNSUPPORTED_MEDIA_TYPE: "UNSUPPORTED_MEDIA_TYPE",
  /** A cookie-authenticated mutation came from another origin. */
  CROSS_SITE_REQUEST: "CROSS_SITE_REQUEST",
  RATE_LIMITED: "RATE_LIMITED",
  SIGNUP_CLOSED: "SIGNUP_CLOSED",

  /** Join: the peer token is unknown or malformed. */
  TOKEN_INVALID: "TOKEN_INVALID",
  /** Join: the peer token was revoked. */
  TOKEN_REVOKED: "TOKEN_REVOKED",
  /** Join: the token's owner is not (or no longer) on the experiment's allowlist. */
  NOT_ALLOWLISTED: "NOT_ALLOWLISTED",
  /** Join: the token's owner is banned from the experiment. */
  BANNED: "BANNED",
  /** Join: the organizer has paused the run. */
  EXPERIMENT_PAUSED: "EXPERIMENT_PAUSED",
  /** Join: the token, or its owner, already runs as many machines as the organizer allows. */
  TOO_MANY_NODES: "TOO_MANY_NODES",
  /** Join: the owner retired this machine (its key) on the volunteer page. */
  NODE_RETIRED: "NODE_RETIRED",

  /**
   * Metrics or checkpoint of an older rollback generation than the run's: the organizer rolled the
   * run back since, so the sender's state is stale.
   */
  STALE_GENERATION: "STALE_GENERATION",

  /** Upload: the file does not hash to the declared SHA-256. */
  CHECKSUM_MISMATCH: "CHECKSUM_MISMATCH",
  /** Upload: the body ended before the declared size, or ran past it. */
  SIZE_MISMATCH: "SIZE_MISMATCH",
  RANGE_NOT_SATISFIABLE: "RANGE_NOT_SATISFIABLE",
  /** The platform has no built volunteer and aux programs to serve (`npm run build -w @barnraise/web`). */
  PROGRAMS_NOT_BUILT: "PROGRAMS_NOT_BUILT",
} as const;
export type AppErrorCode = (typeof AppErrorCode)[keyof typeof AppErrorCode];

export const appErrorStatus: Record<AppErrorCode, number> = {
  UNAUTHENTICATED: 401,
  FORBIDDEN: 403,
  NOT_FOUND: 404,
  INVALID_INPUT: 400,
  CONFLICT: 409,
  PAYLOAD_TOO_LARGE: 413,
  UNSUPPORTED_MEDIA_TYPE: 415,
  CROSS_SITE_REQUEST: 403,
  RATE_LIMITED: 429,
  SIGNUP_CLOSED: 403,
  TOKEN_INVALID: 401,
  TOKEN_REVOKED: 401,
  NOT_ALLOWLISTED: 403,
  BANNED: 403,
  EXPERIMENT_PAUSED: 409,
  TOO_MANY_NODES: 409,
  NODE_RETIRED: 403,
  STALE_GENERATION: 409,
  CHECKSUM_MISMATCH: 400,
  SIZE_MISMATCH: 400,
  RANGE_NOT_SATISFIABLE: 416,
  PROGRAMS_NOT_BUILT: 503,
};
