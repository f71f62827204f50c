import { ExitCode } from "./identity-command.ts";
import { JoinErrorCode } from "../platform/join-error.ts";

/** Exit codes of the node programs for a platform's refusal, on top of ExitCode. */
export const JoinExitCode = {
  ...ExitCode,
  /** The token is unknown, revoked, or of the wrong kind. */
  badToken: 10,
  notAllowlisted: 11,
  banned: 12,
  /** The pass, the config or the authority key did not verify: the answer was not the platform's. */
  tampered: 13,
  /** The token or its owner runs as many machines as allowed, or this machine was retired. */
  noPlace: 17,
} as const;

/** The exit code for a failed join or pass refresh. */
export function joinExitCode(code: JoinErrorCode): number {
  switch (code) {
    case JoinErrorCode.TOKEN_INVALID:
    case JoinErrorCode.TOKEN_REVOKED:
      return JoinExitCode.badToken;
    case JoinErrorCode.NOT_ALLOWLISTED:
      return JoinExitCode.notAllowlisted;
    case JoinErrorCode.BANNED:
      return JoinExitCode.banned;
    case JoinErrorCode.PASS_INVALID:
    case JoinErrorCode.CONFIG_TAMPERED:
    case JoinErrorCode.AUTHORITY_CHANGED:
      return JoinExitCode.tampered;
    case JoinErrorCode.TOO_MANY_NODES:
    case JoinErrorCode.NODE_RETIRED:
      return JoinExitCode.noPlace;
    default:
      return JoinExitCode.failure;
  }
}

/**
 * `--server` and `--token` of a node program, each falling back to BARNRAISE_SERVER and
 * BARNRAISE_TOKEN (which keeps the token out of the process list). The server must be an http(s)
 * URL; a RangeError says what is missing or wrong.
 */
export function readPlatformTarget(
  options: { server?: string | undefined; token?: string | undefined },
  env: Readonly<Record<string, string | undefined>>,
): { server: URL; token: string } {
  const text = options.server ?? env.BARNRAISE_SERVER;
  if (text === undefined || text === "") throw new RangeError("--server is required");
  let server: URL;
  try {
    server = new URL(text);
  } catch {
    throw new RangeError(`--server ${JSON.stringify(text)} is not a URL`);
  }
  if (server.protocol !== "https:" && server.protocol !== "http:") {
    throw new RangeError(`--server must be an http(s) URL, not ${server.protocol}`);
  }
  const token = options.token ?? env.BARNRAISE_TOKEN;
  if (token === undefined || token.trim() === "") throw new RangeError("--token is required");
  return { server, token };
}

/** `--metrics-port`: absent, or a TCP port (0: any free one). Throws RangeError naming the option. */
export function parseMetricsPort(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const port = Number(text);
  if (!/^\d{1,5}$/.test(text) || port > 65_535) {
    throw new RangeError(`--metrics-port must be a TCP port from 0 to 65535, got ${JSON.stringify(text)}`);
  }
  return port;
}
