import { encodePublicKey, type KeyPair } from "@barnraise/protocol";
import { readBoundedText } from "./bounded-body.ts";
import { JoinError, JoinErrorCode, joinErrorFromResponse, parseRetryAfter } from "./join-error.ts";
import { verifyJoinResponse, type JoinedExperiment } from "./join-response.ts";

/**
 * The node's side of the join (DESIGN §3): trade a credential and the node's public key for an
 * access pass, the signed experiment config and initial peers, and verify all of it before
 * returning. The same call refreshes the pass. A program's credential is a peer token
 * (`POST /api/v1/join`); a browser tab's is the volunteer's signed-in session on the platform that
 * serves its page (`POST /api/v1/experiments/{id}/browser-join`, the session cookie sent along).
 */

/** Responses larger than this are refused unread (a join response is a few KiB). */
export const MAX_JOIN_RESPONSE_BYTES = 1024 * 1024;
export const DEFAULT_JOIN_TIMEOUT_MS = 30_000;
export const JOIN_PATH = "api/v1/join";

/** What a node joins with. */
export type JoinCredential = PeerTokenCredential | SessionCredential;

/** The peer token (brp_…) shown once on the experiment's page: the CLI's credential. */
export interface PeerTokenCredential {
  readonly kind: "token";
  readonly token: string;
}

/**
 * The signed-in session of the page the node runs in ("Contribute from this browser"): the browser
 * sends its session cookie to the platform's own origin, so there is no token to keep. The
 * platform issues a pass for the experiment named here only.
 */
export interface SessionCredential {
  readonly kind: "session";
  readonly experimentId: string;
}

/** A peer token as a credential. */
export function peerToken(token: string): PeerTokenCredential {
  return { kind: "token", token };
}

export interface JoinOptions {
  /** The platform's base URL (a path prefix is kept: https://host/barnraise/ → …/barnraise/api/v1/join). */
  server: URL;
  credential: JoinCredential;
  /** The node's identity: the pass binds this key. */
  keyPair: KeyPair;
  /** Authority key pinned on first use; a different key is refused with AUTHORITY_CHANGED. */
  pinnedAuthority?: Uint8Array | undefined;
  /** The experiment this node belongs to, when known; another is refused with AUTHORITY_CHANGED. */
  experimentId?: string | undefined;
  fetch?: typeof fetch;
  now?: () => number;
  signal?: AbortSignal | undefined;
  /** Per-request timeout; a timeout counts as unreachable (retryable). */
  timeoutMs?: number;
}

/** Joins the experiment the credential names and returns it verified. Throws JoinError. */
export async function joinPlatform(options: JoinOptions): Promise<JoinedExperiment> {
  const now = options.now ?? Date.now;
  const { credential } = options;
  const url = joinUrl(options.server, credential);
  const publicKey = encodePublicKey(options.keyPair.publicKey);
  if (credential.kind === "token" && credential.token.trim() === "") {
    throw new JoinError(JoinErrorCode.TOKEN_INVALID, "no peer token given: pass --token with your token");
  }
  const body = JSON.stringify(
    credential.kind === "token" ? { token: credential.token, publicKey } : { publicKey },
  );
  const response = await send(url, body, credential, options);
  const text = await readBounded(response, options.signal);
  if (response.status !== 200) {
    const retryAfterMs = parseRetryAfter(response.headers.get("retry-after"), now());
    throw joinErrorFromResponse(response.status, errorBody(text), retryAfterMs);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (cause) {
    throw new JoinError(
      JoinErrorCode.BAD_RESPONSE,
      `the server's answer at ${url.href} is not JSON; check that --server is the Barnraise platform`,
      { cause, status: 200 },
    );
  }
  return verifyJoinResponse(json, {
    publicKey: options.keyPair.publicKey,
    now: now(),
    pinnedAuthority: options.pinnedAuthority,
    // A session joins the experiment it names, and no other.
    experimentId:
      options.experimentId ?? (credential.kind === "session" ? credential.experimentId : undefined),
  });
}

/** The credential's join route under `server`, refusing anything but http and https. */
export function joinUrl(server: URL, credential: JoinCredential): URL {
  if (server.protocol !== "http:" && server.protocol !== "https:") {
    throw new JoinError(
      JoinErrorCode.SERVER_UNREACHABLE,
      `--server must be an http:// or https:// URL, not ${server.protocol}`,
    );
  }
  const base = new URL(server.href);
  base.search = "";
  base.hash = "";
  if (!base.pathname.endsWith("/")) base.pathname += "/";
  if (credential.kind === "token") return new URL(JOIN_PATH, base);
  return new URL(`api/v1/experiments/${encodeURIComponent(credential.experimentId)}/browser-join`, base);
}

async function send(
  url: URL,
  body: string,
  credential: JoinCredential,
  options: JoinOptions,
): Promise<Response> {
  throwIfAborted(options.signal);
  const timeout = AbortSignal.timeout(options.timeoutMs ?? DEFAULT_JOIN_TIMEOUT_MS);
  const signal = options.signal === undefined ? timeout : AbortSignal.any([options.signal, timeout]);
  let response: Response;
  try {
    response = await (options.fetch ?? fetch)(url, {
      method: "POST",
      headers: { "content-type": "application/json", accept: "application/json" },
      body,
      // A token travels in the body; a session only in the cookie the browser sends to its own origin.
      credentials: credential.kind === "session" ? "same-origin" : "omit",
      // The request carries the credential: never let a redirect send it to another address.
      redirect: "manual",
      signal,
    });
  } catch (cause) {
    throwIfAborted(options.signal);
    const why = timeout.aborted ? "timed out" : describeNetworkError(cause);
    throw new JoinError(
      JoinErrorCode.SERVER_UNREACHABLE,
      `cannot reach the platform at ${url.origin} (${why}); check --server and your network, the peer will try again`,
      { cause, retryable: true },
    );
  }
  if (response.status >= 300 && response.status < 400) {
    await response.body?.cancel();
    const location = response.headers.get("location");
    throw new JoinError(
      JoinErrorCode.SERVER_ERROR,
      `the server redirects the join (${response.status}${location === null ? "" : ` to ${location}`}); ` +
        "use the platform's final address as --server",
      { status: response.status },
    );
  }
  return response;
}

/** Reads the body as UTF-8, refusing more than MAX_JOIN_RESPONSE_BYTES without buffering them. */
async function readBounded(response: Response, signal: AbortSignal | undefined): Promise<string> {
  let text: string | undefined;
  try {
    text = await readBoundedText(response, MAX_JOIN_RESPONSE_BYTES);
  } catch (cause) {
    throwIfAborted(signal);
    throw new JoinError(
      JoinErrorCode.SERVER_UNREACHABLE,
      "the connection to the platform broke while reading its answer; the peer will try again",
      { cause, retryable: true, status: response.status },
    );
  }
  if (text === undefined) throw oversized(response.status);
  return text;
}

function oversized(status: number): JoinError {
  return new JoinError(
    JoinErrorCode.BAD_RESPONSE,
    `the server's answer is larger than ${MAX_JOIN_RESPONSE_BYTES} bytes; check that --server is the Barnraise platform`,
    { status },
  );
}

/** The platform's `{ error: { code, message, issues } }`, when the text is one. */
function errorBody(text: string): Parameters<typeof joinErrorFromResponse>[1] {
  try {
    const parsed = JSON.parse(text) as { error?: unknown };
    const error = parsed.error;
    if (typeof error !== "object" || error === null) return undefined;
    const { code, message, issues } = error as Record<string, unknown>;
    return {
      ...(typeof code === "string" ? { code: code.slice(0, 64) } : {}),
      ...(typeof message === "string" ? { message: message.slice(0, 500) } : {}),
      ...(Array.isArray(issues) ? { issues: issues.filter(isIssue) } : {}),
    };
  } catch {
    return undefined;
  }
}

function isIssue(value: unknown): value is { path?: string } {
  return typeof value === "object" && value !== null;
}

function throwIfAborted(signal: AbortSignal | undefined): void {
  if (signal?.aborted === true) {
    throw new JoinError(JoinErrorCode.ABORTED, "the join was cancelled", { cause: signal.reason });
  }
}

function describeNetworkError(error: unknown): string {
  const cause = error instanceof Error && error.cause instanceof Error ? error.cause : error;
  const code = typeof cause === "object" && cause !== null ? (cause as { code?: unknown }).code : undefined;
  if (typeof code === "string") return code;
  return cause instanceof Error ? cause.message : String(cause);
}
