/**
 * Why joining the platform failed, as a stable code a CLI can turn into an exit code, plus whether
 * trying again later can help. Messages say what the volunteer should do next.
 */
export const JoinErrorCode = {
  /** The platform does not know the token (mistyped, deleted, or from another server). */
  TOKEN_INVALID: "TOKEN_INVALID",
  /** The token was revoked on the platform. */
  TOKEN_REVOKED: "TOKEN_REVOKED",
  /** The token's owner is not approved for the experiment (or, for an aux token, no longer organizes it). */
  NOT_ALLOWLISTED: "NOT_ALLOWLISTED",
  /** The token's owner is banned from the experiment. */
  BANNED: "BANNED",
  /** The organizer has paused the experiment. */
  EXPERIMENT_PAUSED: "EXPERIMENT_PAUSED",
  /** This node's public key is already registered to another user. */
  KEY_CONFLICT: "KEY_CONFLICT",
  /** The token, or its owner, already runs as many machines as the organizer allows. */
  TOO_MANY_NODES: "TOO_MANY_NODES",
  /** The owner retired this machine (its key) on the volunteer page. */
  NODE_RETIRED: "NODE_RETIRED",
  /** The access pass does not verify: wrong signer, another key, another experiment, expired. */
  PASS_INVALID: "PASS_INVALID",
  /** The experiment config's signature does not verify under the authority key, or names another experiment. */
  CONFIG_TAMPERED: "CONFIG_TAMPERED",
  /** The authority key (or experiment) differs from the one this node pinned on first use. */
  AUTHORITY_CHANGED: "AUTHORITY_CHANGED",
  /** The signed-in session the node joined with has ended (a browser tab's credential). */
  SIGNED_OUT: "SIGNED_OUT",
  /** No answer: connection refused, DNS failure, timeout. */
  SERVER_UNREACHABLE: "SERVER_UNREACHABLE",
  /** The server answered with an error that is not one of the above (5xx, 429, unknown code …). */
  SERVER_ERROR: "SERVER_ERROR",
  /** A 200 answer that is not a join response: not JSON, too large, missing fields, undecodable keys. */
  BAD_RESPONSE: "BAD_RESPONSE",
  /** The caller aborted the join. */
  ABORTED: "ABORTED",
} as const;
export type JoinErrorCode = (typeof JoinErrorCode)[keyof typeof JoinErrorCode];

export interface JoinErrorOptions {
  /** True when the same request may succeed later (unreachable, 5xx, 429). */
  retryable?: boolean;
  /** How long the server asked us to wait (Retry-After), in milliseconds. */
  retryAfterMs?: number;
  /** The HTTP status, when the server answered. */
  status?: number;
  /** The platform's own error code (`{ error: { code } }`), when it sent one. */
  platformCode?: string;
  cause?: unknown;
}

/** A failed join. Branch on `code`; `retryable` says whether `joinWithRetry` tries again. */
export class JoinError extends Error {
  override readonly name = "JoinError";
  readonly code: JoinErrorCode;
  readonly retryable: boolean;
  readonly retryAfterMs: number | undefined;
  readonly status: number | undefined;
  readonly platformCode: string | undefined;

  constructor(code: JoinErrorCode, message: string, options: JoinErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.retryable = options.retryable ?? false;
    this.retryAfterMs = options.retryAfterMs;
    this.status = options.status;
    this.platformCode = options.platformCode;
  }
}

export function isJoinError(error: unknown, code?: JoinErrorCode): error is JoinError {
  return error instanceof JoinError && (code === undefined || error.code === code);
}

/** What the platform's join refusals (apps/web `AppErrorCode`) mean to a volunteer. */
const refusals: Readonly<Record<string, { code: JoinErrorCode; advice: string }>> = {
  TOKEN_INVALID: {
    code: JoinErrorCode.TOKEN_INVALID,
    advice:
      "the server does not know this token: check that you copied all of it and that --server is " +
      "the platform that issued it, or create a new token on the experiment's page",
  },
  TOKEN_REVOKED: {
    code: JoinErrorCode.TOKEN_REVOKED,
    advice: "this token was revoked: create a new token on the experiment's page",
  },
  NOT_ALLOWLISTED: {
    code: JoinErrorCode.NOT_ALLOWLISTED,
    advice:
      "you are not on this experiment's allowlist: ask the organizer to add you to the allowlist " +
      "(or to approve your join request), then start the peer again",
  },
  FORBIDDEN: {
    code: JoinErrorCode.NOT_ALLOWLISTED,
    advice:
      "this aux token's owner no longer organizes the experiment: the current organizer must " +
      "create a new aux token",
  },
  BANNED: {
    code: JoinErrorCode.BANNED,
    advice: "the organizer has banned you from this experiment; this token cannot join it",
  },
  EXPERIMENT_PAUSED: {
    code: JoinErrorCode.EXPERIMENT_PAUSED,
    advice: "the organizer has paused this experiment: start the peer again once it is resumed",
  },
  TOO_MANY_NODES: {
    code: JoinErrorCode.TOO_MANY_NODES,
    advice:
      "this token (or you, across your tokens) already runs as many machines as the organizer allows: " +
      "retire a machine you no longer use on the experiment's volunteer page, then start this one again",
  },
  NODE_RETIRED: {
    code: JoinErrorCode.NODE_RETIRED,
    advice:
      "this machine was retired on the experiment's volunteer page: to run it again, give it a new " +
      "identity (pass --identity with a new file, or delete this one to make a new key)",
  },
  UNAUTHENTICATED: {
    code: JoinErrorCode.SIGNED_OUT,
    advice: "the platform no longer knows this browser's session: sign in again, then contribute again",
  },
  CONFLICT: {
    code: JoinErrorCode.KEY_CONFLICT,
    advice:
      "this node's identity key is already registered to another user: use another identity file " +
      "(or delete this one to make a new key)",
  },
};

/** Turns an HTTP error answer of the join route into a JoinError. */
export function joinErrorFromResponse(
  status: number,
  body: { code?: string; message?: string; issues?: readonly { path?: string }[] } | undefined,
  retryAfterMs: number | undefined,
): JoinError {
  const platformCode = body?.code;
  const said = body?.message === undefined ? "" : ` (server said: ${body.message})`;
  const base = { status, ...(platformCode === undefined ? {} : { platformCode }) };
  const known = platformCode === undefined ? undefined : refusals[platformCode];
  if (known !== undefined) return new JoinError(known.code, known.advice + said, base);
  if (platformCode === "INVALID_INPUT" && body?.issues?.some((issue) => issue.path === "token")) {
    return new JoinError(
      JoinErrorCode.TOKEN_INVALID,
      `the server refused the token's format: check that you copied all of it${said}`,
      base,
    );
  }
  if (status === 429 || status >= 500) {
    const wait = retryAfterMs === undefined ? "" : `; it asked to wait ${Math.ceil(retryAfterMs / 1000)} s`;
    return new JoinError(
      JoinErrorCode.SERVER_ERROR,
      `the server answered ${status}${platformCode === undefined ? "" : ` ${platformCode}`}${wait}; ` +
        `the peer will try again${said}`,
      { ...base, retryable: true, ...(retryAfterMs === undefined ? {} : { retryAfterMs }) },
    );
  }
  if (status === 404) {
    return new JoinError(
      JoinErrorCode.SERVER_ERROR,
      `the server has no join endpoint (404): check that --server is the Barnraise platform's address${said}`,
      base,
    );
  }
  return new JoinError(
    JoinErrorCode.SERVER_ERROR,
    `the server refused the join with ${status}${platformCode === undefined ? "" : ` ${platformCode}`}; ` +
      `this peer and the server may be different versions${said}`,
    base,
  );
}

/** Retry-After as milliseconds: delta-seconds or an HTTP date; undefined when absent or unreadable. */
export function parseRetryAfter(header: string | null, now: number): number | undefined {
  if (header === null) return undefined;
  const text = header.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  const date = Date.parse(text);
  return Number.isNaN(date) ? undefined : Math.max(0, date - now);
}
