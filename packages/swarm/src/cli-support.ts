import { ExitCode } from "./identity-command.ts";
import { JoinErrorCode } from "./platform/join-error.ts";

/** Exit codes of the node programs for a platform's refusal, on top of ExitCode. */
export const JoinExitCode = {
  ...ExitCode,
  /** The token is unknown, revoked, or of the wrong kind. */
  badToken: 10,
  notAllowlisted: 11,
  banned: 12,
  /** The pass, the config or the authority key did not verify: the answer was not the platform's. */
  tampered: 13,
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
    default:
      return JoinExitCode.failure;
  }
}

/** `--server` (or BARNRAISE_SERVER): an http(s) URL; a RangeError says what is wrong with it. */
export function parseServerUrl(text: string | undefined): URL {
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
  return server;
}
