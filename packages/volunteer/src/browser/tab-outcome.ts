import { isJoinError, JoinErrorCode } from "@barnraise/swarm";

/**
 * How a tab's node ended, in the words of the page that runs it: the CLI's advice speaks of tokens
 * and identity files, a tab has neither.
 */

/**
 * Refusals of the tab's key, not of the volunteer: the browser's node was retired under My nodes or
 * its Browser token revoked (or its key is another account's). At the volunteer's next click, the tab joins again as a
 * new node with a new key.
 */
export function needsNewIdentity(error: unknown): boolean {
  return (
    isJoinError(error, JoinErrorCode.TOKEN_REVOKED) ||
    isJoinError(error, JoinErrorCode.NODE_RETIRED) ||
    isJoinError(error, JoinErrorCode.KEY_CONFLICT)
  );
}

/** What the panel says when the tab's node stopped with `error`. */
export function tabFailure(error: unknown): string {
  if (!isJoinError(error)) return error instanceof Error ? error.message : String(error);
  switch (error.code) {
    case JoinErrorCode.TOKEN_REVOKED:
      return (
        "This browser's node was revoked (its Browser entry under Your tokens on the experiment's volunteer " +
        "page). Contribute again to join as a new node."
      );
    case JoinErrorCode.NODE_RETIRED:
      return "This browser's node was retired under My nodes. Contribute again to join as a new node.";
    case JoinErrorCode.KEY_CONFLICT:
      return "This browser's key belongs to another account. Contribute again to join with a new key.";
    case JoinErrorCode.TOKEN_INVALID:
      return "The platform does not know this browser's node: reload the page and contribute again.";
    case JoinErrorCode.EXPERIMENT_PAUSED:
      return "The organizer has paused this run: contribute again once it resumes.";
    case JoinErrorCode.BANNED:
      return "The organizer has banned you from this experiment.";
    case JoinErrorCode.NOT_ALLOWLISTED:
      return "You are not approved for this experiment (any more): ask the organizer to approve you.";
    case JoinErrorCode.TOO_MANY_NODES:
      return (
        "You already run as many machines as the organizer allows: retire one on the volunteer page, " +
        "then contribute again."
      );
    case JoinErrorCode.SIGNED_OUT:
      return "Your session ended (you signed out, or it expired): sign in again, then contribute again.";
    case JoinErrorCode.PASS_INVALID:
    case JoinErrorCode.CONFIG_TAMPERED:
    case JoinErrorCode.AUTHORITY_CHANGED:
      return `The platform's answer did not verify, so the tab did not join: ${error.message}`;
    default:
      return error.message;
  }
}
